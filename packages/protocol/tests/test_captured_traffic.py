"""Bytes from real clients: librdkafka (confluent-kafka, and kcat with its own librdkafka)
produces to a small listener that answers ApiVersions, Metadata and Produce with our
encoders; every Produce frame it sends is kept and decoded with ours — header, body,
batches, records — and must hold exactly the keys, values and headers that were produced,
on the partitions the clients' partitioners chose (murmur2 / CRC-32, as ours compute).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from gregor.protocol.apis.api_versions import ApiVersionsResponse
from gregor.protocol.apis.fetch import FetchRequest
from gregor.protocol.apis.find_coordinator import FindCoordinatorRequest
from gregor.protocol.apis.metadata import MetadataRequest
from gregor.protocol.apis.produce import ProduceRequest
from gregor.protocol.compression import Compression
from gregor.protocol.framing import FrameReader, RequestHeader, decode_request, encode_response
from gregor.protocol.hashing import consistent_partition, default_partition
from gregor.protocol.records import iter_batches
from gregor.protocol.schema import Request, Response
from gregor_testing.stub_broker import api_versions_answer, metadata_answer, produce_answer

TOPIC = "captured"
PARTITIONS = 6
NODE_ID = 1
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
WAIT = 60.0  # seconds: the longest any client may take to deliver everything


class CapturingBroker:
    """A one-broker cluster as far as a producer can tell; keeps every Produce frame.

    One thread accepts, one per connection serves. An exception in a serving thread is
    kept in `errors` (the test checks it is empty) and closes that connection.
    """

    def __init__(self, max_produce: int, max_fetch: int) -> None:
        self.max_produce = max_produce
        self.max_fetch = max_fetch
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.produce_frames: list[bytes] = []
        self.errors: list[BaseException] = []
        self.next_offsets: dict[int, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.connections: list[socket.socket] = []
        self.threads = [threading.Thread(target=self.accept, daemon=True)]
        self.threads[0].start()

    def accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed by stop()
            with self.lock:
                self.connections.append(conn)
            thread = threading.Thread(target=self.serve, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def serve(self, conn: socket.socket) -> None:
        reader = FrameReader(64 * 1024 * 1024)
        try:
            while data := conn.recv(1 << 16):
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    answer = self.answer(frame)
                    if answer is not None:
                        conn.sendall(answer)
        except OSError:
            pass  # the client or stop() closed the connection
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            conn.close()

    def answer(self, frame: bytes) -> bytes | None:
        header, request = decode_request(frame)
        version = header.request_api_version
        response: Response
        if isinstance(request, ProduceRequest):
            with self.lock:
                self.produce_frames.append(frame)
            if request.acks == 0:
                return None
            with self.lock:
                response = produce_answer(request, self.next_offsets, count_records)
        elif isinstance(request, MetadataRequest):
            response = metadata_answer(
                request,
                node_id=NODE_ID,
                port=self.port,
                topic=TOPIC,
                partitions=PARTITIONS,
                cluster_id="gregor-captured-traffic",
                topic_id=uuid.UUID(int=7),
            )
        elif header.request_api_key == ApiVersionsResponse.api_key:
            # librdkafka picks its message format from the Produce *and* Fetch versions
            # librdkafka picks its message format from the Produce *and* Fetch versions,
            # and takes lz4 to be supported where FindCoordinator is.
            response = api_versions_answer(
                {
                    ProduceRequest.api_key: (0, self.max_produce),
                    FetchRequest.api_key: (0, self.max_fetch),
                    FindCoordinatorRequest.api_key: (0, 0),
                    MetadataRequest.api_key: (0, 12),
                    ApiVersionsResponse.api_key: (0, 3),
                }
            )
        else:
            raise AssertionError(f"unexpected request {describe(header, request)}")
        return encode_response(response, version, header.correlation_id)

    def stop(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread; close() does not
        self.server.close()
        with self.lock:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
        for thread in self.threads:
            thread.join(timeout=10)


def count_records(records: bytes | bytearray | memoryview) -> int:
    return sum(len(batch) for batch in iter_batches(records))


def describe(header: RequestHeader, request: Request) -> str:
    return f"{type(request).__name__} v{header.request_api_version}"


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> Iterator[CapturingBroker]:
    max_produce, max_fetch = getattr(request, "param", (11, 16))
    server = CapturingBroker(max_produce, max_fetch)
    try:
        yield server
    finally:
        server.stop()
    assert server.errors == []


Message = tuple[bytes, bytes, tuple[tuple[str, bytes | None], ...]]


def messages(count: int) -> list[Message]:
    """Compressible values of a few sizes, some with headers (a null one included)."""
    out: list[Message] = []
    for i in range(count):
        value = (b"value %d of the captured traffic test; " % i) * (1 + i % 25)
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 0:
            headers = (("trace-id", b"t-%d" % i), ("empty", None))
        out.append((b"key-%d" % i, value, headers))
    return out


def captured(broker: CapturingBroker) -> list[tuple[RequestHeader, ProduceRequest]]:
    out = []
    for frame in broker.produce_frames:
        header, request = decode_request(frame)
        assert isinstance(request, ProduceRequest)
        out.append((header, request))
    return out


def decoded_records(
    broker: CapturingBroker, codec: Compression, magic: int
) -> dict[int, list[Message]]:
    """Per partition, the records of every captured Produce request, checked on the way."""
    by_partition: dict[int, list[Message]] = defaultdict(list)
    requests = captured(broker)
    assert requests, "the client sent no Produce request"
    for _, request in requests:
        assert request.transactional_id is None
        assert [t.name for t in request.topic_data] == [TOPIC]
        for data in request.topic_data[0].partition_data:
            assert isinstance(data.records, bytes)
            batches = list(iter_batches(data.records, strict=True))
            assert batches
            for batch in batches:
                batch.verify_crc()
                assert batch.header.magic == magic
                assert batch.header.compression is codec
                assert not batch.header.is_control and not batch.header.is_transactional
                for record in batch:
                    assert record.key is not None and record.value is not None
                    by_partition[data.index].append((record.key, record.value, record.headers))
    return by_partition


def check_records(
    by_partition: dict[int, list[Message]], sent: list[Message], partition_of: Any
) -> None:
    got = [m for records in by_partition.values() for m in records]
    assert Counter(got) == Counter(sent)
    for partition, records in by_partition.items():
        assert all(partition_of(key) == partition for key, _, _ in records)
        # Order within a partition is the order of produce() calls.
        order = [sent.index(m) for m in records]
        assert order == sorted(order)
    assert len(by_partition) > 1  # the keys spread over the partitions


def produce_with_confluent(broker: CapturingBroker, codec: str, sent: list[Message]) -> None:
    errors: list[KafkaError] = []
    offsets: dict[int, list[int]] = defaultdict(list)

    def delivered(error: KafkaError | None, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets[message.partition()].append(message.offset())

    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{broker.port}",
            "compression.type": codec,
            "partitioner": "murmur2_random",
            "linger.ms": 50,
            "enable.idempotence": False,
            "acks": "all",
        }
    )
    for key, value, headers in sent:
        producer.produce(TOPIC, value=value, key=key, headers=list(headers), on_delivery=delivered)
    assert producer.flush(WAIT) == 0
    assert errors == []
    # The offsets our ProduceResponses assigned reached the client, in order.
    assert all(got == list(range(len(got))) for got in map(sorted, offsets.values()))
    assert sum(len(got) for got in offsets.values()) == len(sent)


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_produce_requests(broker: CapturingBroker, codec: str) -> None:
    sent = messages(200)
    produce_with_confluent(broker, codec, sent)
    for header, _ in captured(broker):
        assert header.client_id == "rdkafka"
        assert header.request_api_version >= 9  # flexible versions, batches of magic 2
    records = decoded_records(broker, Compression[codec.upper()], magic=2)
    check_records(records, sent, lambda key: default_partition(key, PARTITIONS))


@pytest.mark.parametrize("broker", [(2, 3)], indirect=True)
@pytest.mark.parametrize("codec", [c for c in CODECS if c != "zstd"])
def test_confluent_kafka_legacy_message_sets(broker: CapturingBroker, codec: str) -> None:
    """A broker of Produce v2 and Fetch v3 at most gets magic 1 message sets from librdkafka."""
    sent = [(key, value, ()) for key, value, _ in messages(120)]
    produce_with_confluent(broker, codec, sent)
    assert {header.request_api_version for header, _ in captured(broker)} == {2}
    records = decoded_records(broker, Compression[codec.upper()], magic=1)
    check_records(records, sent, lambda key: default_partition(key, PARTITIONS))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_requests(broker: CapturingBroker, codec: str) -> None:
    # kcat reads key<TAB>value lines; -H puts the same header on every message.
    sent: list[Message] = [
        (b"kcat-key-%d" % i, b"kcat value %d " % i * (1 + i % 30), (("source", b"kcat"),))
        for i in range(150)
    ]
    lines = b"".join(key + b"\t" + value + b"\n" for key, value, _ in sent)
    result = subprocess.run(
        [
            "kcat",
            "-P",
            "-b",
            f"127.0.0.1:{broker.port}",
            "-t",
            TOPIC,
            "-z",
            codec,
            "-K",
            "\t",
            "-H",
            "source=kcat",
            "-X",
            "linger.ms=50",
        ],
        input=lines,
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    records = decoded_records(broker, Compression[codec.upper()], magic=2)
    # kcat keeps librdkafka's default partitioner, consistent_random: CRC-32 of the key.
    check_records(records, sent, lambda key: consistent_partition(key, PARTITIONS))
