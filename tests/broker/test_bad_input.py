"""Bad input from the network: the broker closes that connection (or answers with Kafka's
error), keeps serving its other connections, and its logs are untouched."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.apis.api_versions import ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from gregor.protocol.apis.metadata import MetadataRequest, MetadataResponse
from gregor.protocol.apis.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from gregor.protocol.errors import ErrorCode
from gregor.protocol.framing import decode_response, encode_request
from gregor.protocol.records import BatchBuilder
from gregor_testing.cluster import WireClient, create_topic, unique_topic

TOPIC_LIMIT = 2000  # the topic's max.message.bytes


@pytest.fixture(scope="module")
def topic(shared_cluster: LocalCluster) -> str:
    name = unique_topic("bad-input")
    create_topic(
        shared_cluster,
        name,
        partitions=1,
        replication_factor=1,
        configs={"max.message.bytes": str(TOPIC_LIMIT)},
    )
    return name


@pytest.fixture
def leader(shared_cluster: LocalCluster) -> BrokerProcess:
    return shared_cluster.broker(0)  # create_topic puts partition 0's leader on broker 0


@pytest.fixture
def bystander(leader: BrokerProcess) -> Iterator[WireClient]:
    """A connection opened before the bad input, which must keep working after it."""
    client = WireClient(leader)
    assert isinstance(client.request(ApiVersionsRequest(), 0), ApiVersionsResponse)
    yield client
    client.close()


def batch(*values: bytes) -> bytes:
    builder = BatchBuilder()
    for value in values:
        builder.append(value, key=b"k")
    return builder.build()


def produce(client: WireClient, topic: str, records: bytes) -> int:
    request = ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(0, records)])],
    )
    response = client.request(request, 9)
    assert isinstance(response, ProduceResponse)
    return response.responses[0].partition_responses[0].error_code


def end_offset(client: WireClient, topic: str) -> int:
    request = ListOffsetsRequest(
        replica_id=-1, topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(0, -1, -1)])]
    )
    response = client.request(request, 5)
    assert isinstance(response, ListOffsetsResponse)
    return response.topics[0].partitions[0].offset


def log_bytes(broker: BrokerProcess, topic: str) -> bytes:
    directory = broker.data_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(Path(directory).glob("*.log")))


def check_unharmed(leader: BrokerProcess, bystander: WireClient, topic: str, before: bytes) -> None:
    assert isinstance(bystander.request(ApiVersionsRequest(), 3), ApiVersionsResponse)
    assert log_bytes(leader, topic) == before
    fresh = WireClient(leader)
    try:
        offset = end_offset(fresh, topic)
        assert produce(fresh, topic, batch(b"after")) == ErrorCode.NONE
        assert end_offset(fresh, topic) == offset + 1
    finally:
        fresh.close()


@pytest.mark.parametrize(
    "garbage",
    [
        # A whole frame of noise (a random length prefix may be a frame the broker rightly
        # waits for); seeded, so every run sends the same noise.
        pytest.param(
            (4092).to_bytes(4, "big") + random.Random(7).randbytes(4092), id="random-bytes"
        ),
        pytest.param((1000).to_bytes(4, "big") + os.urandom(10), id="truncated-frame"),
        pytest.param((3).to_bytes(4, "big") + b"\x00\x12\x00", id="truncated-header"),
        pytest.param((2**31 - 1).to_bytes(4, "big"), id="enormous-length-prefix"),
        pytest.param((0xFFFFFFF0).to_bytes(4, "big"), id="negative-length-prefix"),
        pytest.param(
            (12).to_bytes(4, "big") + (9999).to_bytes(2, "big") + bytes(10), id="unknown-api-key"
        ),
        pytest.param(
            encode_request(ProduceRequest(), 9, 7)[:-1] + b"\xff" * 40, id="malformed-body"
        ),
    ],
)
def test_garbage_closes_that_connection_only(
    leader: BrokerProcess, bystander: WireClient, topic: str, garbage: bytes
) -> None:
    before = log_bytes(leader, topic)
    bad = WireClient(leader)
    try:
        bad.sock.sendall(garbage)
        if garbage.startswith((1000).to_bytes(4, "big")):
            bad.sock.shutdown(socket.SHUT_WR)  # a frame that will never be completed
        assert bad.closed_by_broker()
    finally:
        bad.close()
    check_unharmed(leader, bystander, topic, before)


def test_bytes_after_a_request_are_ignored_as_kafka_ignores_them(
    leader: BrokerProcess, bystander: WireClient, topic: str
) -> None:
    """librdkafka 2.16 sends Metadata v12 with 3 bytes after its fields; Kafka answers it."""
    client = WireClient(leader)
    try:
        metadata = MetadataRequest(topics=None, allow_auto_topic_creation=True)
        frame = encode_request(metadata, 12, 41, "rdkafka")
        stray = b"\x00\x00\x00"
        client.sock.sendall((len(frame) - 4 + len(stray)).to_bytes(4, "big") + frame[4:] + stray)
        size = int.from_bytes(client.exactly(4), "big")
        correlation, response = decode_response(client.exactly(size), 3, 12, strict=True)
        assert correlation == 41
        assert isinstance(response, MetadataResponse)
        assert topic in {t.name for t in response.topics}
        assert {b.node_id for b in response.brokers} >= {leader.broker_id}
        # The connection stays open and in step: a Produce with stray bytes is appended once.
        offset = end_offset(client, topic)
        produce_frame = encode_request(
            ProduceRequest(
                acks=-1,
                timeout_ms=10_000,
                topic_data=[TopicProduceData(topic, [PartitionProduceData(0, batch(b"x"))])],
            ),
            9,
            42,
        )
        client.sock.sendall(
            (len(produce_frame) - 4 + 5).to_bytes(4, "big") + produce_frame[4:] + bytes(5)
        )
        size = int.from_bytes(client.exactly(4), "big")
        correlation, produced = decode_response(client.exactly(size), 0, 9, strict=True)
        assert correlation == 42
        assert isinstance(produced, ProduceResponse)
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        assert produced.responses[0].partition_responses[0].base_offset == offset
        assert end_offset(client, topic) == offset + 1
    finally:
        client.close()


def test_unsupported_api_versions_version_gets_error_35_in_a_v0_body(
    leader: BrokerProcess, bystander: WireClient
) -> None:
    client = WireClient(leader)
    try:
        frame = encode_request(ApiVersionsRequest(), 3, 5, "future-client")
        # Version 999 of ApiVersions: the header says so, the body is whatever that version is.
        frame = frame[:6] + (999).to_bytes(2, "big") + frame[8:]
        client.sock.sendall(frame)
        size = int.from_bytes(client.exactly(4), "big")
        correlation, response = decode_response(client.exactly(size), 18, 0)
        assert correlation == 5
        assert isinstance(response, ApiVersionsResponse)
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
            (18, 0, 4)
        ]
        # The connection stays usable, as with Kafka.
        assert isinstance(client.request(ApiVersionsRequest(), 3), ApiVersionsResponse)
    finally:
        client.close()


def test_bad_crc_is_corrupt_message(
    leader: BrokerProcess, bystander: WireClient, topic: str
) -> None:
    before = log_bytes(leader, topic)
    data = bytearray(batch(b"one", b"two"))
    data[-1] ^= 0xFF  # a bit flipped inside the CRC-covered records
    client = WireClient(leader)
    try:
        offset = end_offset(client, topic)
        assert produce(client, topic, bytes(data)) == ErrorCode.CORRUPT_MESSAGE
        assert end_offset(client, topic) == offset
    finally:
        client.close()
    check_unharmed(leader, bystander, topic, before)


def test_record_over_the_limit_is_message_too_large(
    leader: BrokerProcess, bystander: WireClient, topic: str
) -> None:
    before = log_bytes(leader, topic)
    client = WireClient(leader)
    try:
        offset = end_offset(client, topic)
        too_large = batch(os.urandom(TOPIC_LIMIT * 2))
        assert produce(client, topic, too_large) == ErrorCode.MESSAGE_TOO_LARGE
        assert end_offset(client, topic) == offset
    finally:
        client.close()
    check_unharmed(leader, bystander, topic, before)


def test_frame_over_socket_request_max_bytes_is_refused(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    small = cluster_factory(1, socket_request_max_bytes=10_000)
    broker = small.broker(0)
    client = WireClient(broker)
    try:
        client.sock.sendall((10_001).to_bytes(4, "big") + bytes(100))
        assert client.closed_by_broker()
    finally:
        client.close()
    fine = WireClient(broker)
    try:
        assert isinstance(fine.request(ApiVersionsRequest(), 3), ApiVersionsResponse)
    finally:
        fine.close()
