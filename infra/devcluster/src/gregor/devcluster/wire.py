"""One Kafka request on a fresh plain socket: readiness checks and scripts, no client."""

from __future__ import annotations

import socket
from collections.abc import Mapping

from gregor.protocol.apis.api_versions import ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from gregor.protocol.apis.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponsePartition,
)
from gregor.protocol.errors import ErrorCode, ProtocolError
from gregor.protocol.framing import decode_response, encode_request
from gregor.protocol.schema import Request, Response

LATEST = -1  # ListOffsets' timestamp for a partition's end


def send_request(
    host: str, port: int, request: Request, version: int, timeout: float = 5.0
) -> Response:
    """The decoded response to `request`.

    Raises OSError when the broker cannot be reached or hangs up, and the protocol's errors
    for a response that does not decode.
    """
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(encode_request(request, version, 1, "devcluster"))
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"{host}:{port} closed the connection before answering")
            data += chunk
    _, response = decode_response(data[4:], request.api_key, version)
    return response


def api_versions(host: str, port: int, timeout: float = 2.0) -> ApiVersionsResponse | None:
    """A broker's API versions, or None if it does not answer."""
    try:
        response = send_request(host, port, ApiVersionsRequest(), 0, timeout)
    except (OSError, ProtocolError):
        return None
    return response if isinstance(response, ApiVersionsResponse) else None


def end_offsets(
    brokers: Mapping[int, tuple[str, int]], topic: str, timeout: float = 2.0
) -> dict[int, int] | None:
    """The topic's end offsets (partition: high watermark), asked of each partition's
    leader; `brokers` are the cluster's brokers by id, reached at these addresses (not the
    hostnames they advertise). None if the topic does not exist, or a partition has no
    leader that answers; ConnectionError if no broker answers."""
    # Never auto-created by asking: the mirror creates its topics with their source's shape.
    request = MetadataRequest(
        topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    for address in brokers.values():
        try:
            response = send_request(*address, request, 9, timeout)
        except (OSError, ProtocolError):
            continue
        assert isinstance(response, MetadataResponse)
        found = response.topics[0]
        if found.error_code != ErrorCode.NONE or not found.partitions:
            return None
        ends: dict[int, int] = {}
        for partition in found.partitions:
            leader = brokers.get(partition.leader_id)
            offset = None if leader is None else _end_offset(leader, topic, partition, timeout)
            if offset is None:
                return None
            ends[partition.partition_index] = offset
        return ends
    raise ConnectionError(f"no broker answers at {sorted(brokers.values())}")


def _end_offset(
    address: tuple[str, int], topic: str, partition: MetadataResponsePartition, timeout: float
) -> int | None:
    index = partition.partition_index
    request = ListOffsetsRequest(
        replica_id=-1,  # a consumer's question, not a follower's
        topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(index, timestamp=LATEST)])],
    )
    try:
        response = send_request(*address, request, 4, timeout)
    except (OSError, ProtocolError):
        return None
    assert isinstance(response, ListOffsetsResponse)
    answer = response.topics[0].partitions[0]
    return answer.offset if answer.error_code == ErrorCode.NONE else None
