"""The API registry: every API pairs a request and a response, keys carry Kafka's names,
and each request/response version gets the header version Kafka gives it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from kafka.protocol.api_key import ApiKey as KafkaPythonApiKey
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map as kio_api_names

from gregor.protocol.apis import REQUESTS, RESPONSES, ApiKey, api_name
from gregor.protocol.apis.api_versions import ApiVersionsRequest
from gregor.protocol.apis.controlled_shutdown import ControlledShutdownRequest
from gregor.protocol.apis.metadata import MetadataRequest
from gregor.protocol.framing import (
    decode_request,
    encode_request,
    request_header_version,
    response_header_version,
)

# The APIs issues 2 and 19 ask for, at least these versions each.
REQUIRED = {
    "Produce": 11, "Fetch": 16, "ListOffsets": 8, "Metadata": 12, "LeaderAndIsr": 7,
    "StopReplica": 4, "UpdateMetadata": 8, "ControlledShutdown": 3, "OffsetCommit": 9,
    "OffsetFetch": 9, "FindCoordinator": 5, "JoinGroup": 9, "Heartbeat": 4, "LeaveGroup": 5,
    "SyncGroup": 5, "DescribeGroups": 5, "ListGroups": 4, "SaslHandshake": 1,
    "ApiVersions": 4, "CreateTopics": 7, "DeleteTopics": 6, "DeleteRecords": 2,
    "InitProducerId": 5, "OffsetForLeaderEpoch": 4, "AddPartitionsToTxn": 4,
    "AddOffsetsToTxn": 4, "EndTxn": 4, "WriteTxnMarkers": 1, "TxnOffsetCommit": 4,
    "DescribeAcls": 3, "CreateAcls": 3, "DeleteAcls": 3, "DescribeConfigs": 4,
    "AlterConfigs": 2, "AlterReplicaLogDirs": 2, "DescribeLogDirs": 4, "SaslAuthenticate": 2,
    "CreatePartitions": 3, "DeleteGroups": 2, "ElectLeaders": 2, "IncrementalAlterConfigs": 1,
    "AlterPartitionReassignments": 0, "ListPartitionReassignments": 0, "OffsetDelete": 0,
    "DescribeClientQuotas": 1, "AlterClientQuotas": 1, "DescribeUserScramCredentials": 0,
    "AlterUserScramCredentials": 0, "DescribeCluster": 1, "DescribeProducers": 0,
    "DescribeTransactions": 0, "ListTransactions": 0,
    # issue 19 (KIP-848)
    "ConsumerGroupHeartbeat": 1, "ConsumerGroupDescribe": 0,
}  # fmt: skip


def upper_snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", camel).upper()


def test_every_required_api_is_registered_from_version_0() -> None:
    registered = {api_name(key): request for key, request in REQUESTS.items()}
    assert registered.keys() == REQUIRED.keys()
    for name, highest in REQUIRED.items():
        versions = registered[name].valid_versions
        assert (versions.lo, versions.hi >= highest) == (0, True), name


@pytest.mark.parametrize("key", sorted(REQUESTS), ids=api_name)
def test_request_and_response_pair_up(key: int) -> None:
    request, response = REQUESTS[key], RESPONSES[key]
    name = api_name(key)
    assert (request.__name__, response.__name__) == (f"{name}Request", f"{name}Response")
    assert request.api_key == response.api_key == key
    assert request.valid_versions == response.valid_versions
    assert request.flexible_versions == response.flexible_versions
    module = f"gregor.protocol.apis.{upper_snake(name).lower()}"
    assert request.__module__ == response.__module__ == module


def test_api_keys_carry_kafkas_names() -> None:
    for key in REQUESTS:
        assert ApiKey(key).name == upper_snake(api_name(key))
    # kafka-python's enum, written independently, names every key Kafka has had.
    theirs = {member.value: upper_snake(member.name) for member in KafkaPythonApiKey}
    # Kafka 4.1 renamed key 74 (KIP-1142); ours follows the Kafka source our schemas follow.
    theirs[74] = "LIST_CLIENT_METRICS_RESOURCES"
    assert {member.value: member.name for member in ApiKey} == {
        key: name for key, name in theirs.items() if key <= max(ApiKey)
    }
    for key, name in kio_api_names.items():
        if key in REQUESTS:
            assert ApiKey(key).name == name.upper()


def test_unknown_keys_have_a_printable_name() -> None:
    assert api_name(999) == "Unknown(999)"


VERSIONS = [(key, version) for key in sorted(REQUESTS) for version in REQUESTS[key].valid_versions]


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_header_versions_follow_kafkas_rules(key: int, version: int) -> None:
    flexible = REQUESTS[key].is_flexible(version)
    if key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:
        assert request_header_version(key, version) == 0
    else:
        assert request_header_version(key, version) == (2 if flexible else 1)
    if key == ApiKey.API_VERSIONS:
        assert response_header_version(key, version) == 0
    else:
        assert response_header_version(key, version) == (1 if flexible else 0)


def test_header_versions_agree_with_kio() -> None:
    checked = 0
    for key, version in VERSIONS:
        if key not in kio_api_names:
            continue  # kio follows Kafka 4, which dropped the ZooKeeper-era inter-broker APIs
        try:
            request, response = (
                load_request_schema(key, version),
                load_response_schema(key, version),
            )
        except UnknownEntity:  # kio follows Kafka 4, which dropped some old versions
            continue
        assert request_header_version(key, version) == request.__header_schema__.__version__
        assert response_header_version(key, version) == response.__header_schema__.__version__
        checked += 1
    assert checked >= 200  # of our 264 (API, version) pairs


def test_header_bytes_of_each_version() -> None:
    # size, then api key, api version, correlation id; then the client id from v1 on.
    v0 = encode_request(ControlledShutdownRequest(broker_id=5), 0, correlation_id=1)
    assert v0 == bytes.fromhex("0000000c 0007 0000 00000001  00000005")
    v1 = encode_request(MetadataRequest(topics=None), 1, correlation_id=2, client_id="c")
    assert v1 == bytes.fromhex("0000000f 0003 0001 00000002 0001 63  ffffffff")
    # Header v2: the client id stays an int16-length string (here null), then header tags.
    v2 = encode_request(ApiVersionsRequest(), 3, correlation_id=3, client_id=None)
    assert v2 == bytes.fromhex("0000000e 0012 0003 00000003 ffff 00  01 01 00")
    for correlation_id, frame in enumerate((v0, v1, v2), 1):
        header, _ = decode_request(frame[4:])
        assert header.correlation_id == correlation_id


def test_main_prints_every_api() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gregor.protocol"], check=True, capture_output=True, text=True
    ).stdout
    for key, request in REQUESTS.items():
        name = api_name(key)
        assert re.search(rf"^\s*{key}\s+{name}\s+{request.valid_versions}\s", out, re.M), name
