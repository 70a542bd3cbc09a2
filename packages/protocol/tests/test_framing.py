"""Headers and frames, checked byte for byte against the layouts Kafka defines."""

from __future__ import annotations

import pytest

from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from gregor.protocol.apis.metadata import MetadataRequest, MetadataResponse
from gregor.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from gregor.protocol.errors import (
    DecodeError,
    EncodeError,
    FrameTooLargeError,
    UnsupportedVersionError,
)
from gregor.protocol.framing import (
    FrameReader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_chunks,
    peek_request,
)


def test_request_header_v2_keeps_int16_client_id() -> None:
    frame = encode_request(ApiVersionsRequest("gregor", "0.1"), 3, correlation_id=7, client_id="me")
    size = "00000019"
    header = "0012_0003_00000007"  # api key 18, version 3, correlation id 7
    client_id = "0002_6d65"  # int16 length, even in header v2
    header_tags = "00"
    body = "07_677265676f72_04_302e31_00"  # two compact strings, then body tagged fields
    expected = (size + header + client_id + header_tags + body).replace("_", "")
    assert frame.hex() == expected
    header, body = decode_request(frame[4:])
    assert (header.request_api_key, header.correlation_id, header.client_id) == (18, 7, "me")
    assert body == ApiVersionsRequest("gregor", "0.1")


def test_api_versions_response_uses_header_v0_and_tagged_fields() -> None:
    response = ApiVersionsResponse(0, [ApiVersion(18, 0, 4)], finalized_features_epoch=5)
    frame = encode_response(response, 3, correlation_id=7)
    assert frame[4:8] == b"\x00\x00\x00\x07"  # header v0: no tagged-field byte follows
    assert frame.endswith(bytes.fromhex("01_01_08_0000000000000005".replace("_", "")))  # tag 1
    assert decode_response(frame[4:], 18, 3) == (7, response)


def test_unsupported_api_versions_answer_is_read_as_v0() -> None:
    frame = encode_response(ApiVersionsResponse(35, [ApiVersion(18, 0, 3)]), 0, correlation_id=9)
    correlation_id, body = decode_response(frame[4:], 18, 4)
    assert correlation_id == 9
    assert isinstance(body, ApiVersionsResponse)
    assert body.error_code == 35 and body.api_keys == [ApiVersion(18, 0, 3)]


def test_bytes_after_a_request_are_ignored_unless_strict() -> None:
    """As Kafka does: librdkafka 2.16 sends Metadata v12 with 3 stray bytes."""
    request = MetadataRequest(topics=None, allow_auto_topic_creation=True)
    frame = encode_request(request, 12, correlation_id=3, client_id="rdkafka")[4:] + b"\0\0\0"
    header, body = decode_request(frame)
    assert (header.request_api_key, header.correlation_id, body) == (3, 3, request)
    with pytest.raises(DecodeError, match="3 trailing bytes"):
        decode_request(frame, strict=True)


def test_bytes_after_a_response_are_ignored_unless_strict() -> None:
    response = MetadataResponse(cluster_id="c", controller_id=1)
    frame = encode_response(response, 12, correlation_id=7)[4:] + b"\1\2"
    assert decode_response(frame, 3, 12) == (7, response)
    with pytest.raises(DecodeError, match="2 trailing bytes"):
        decode_response(frame, 3, 12, strict=True)


def test_unknown_tagged_fields_survive_a_round_trip() -> None:
    raw = ApiVersionsRequest("a", "b").encode(3)
    with_tag = raw[:-1] + bytes.fromhex("012a03010203")  # one field, tag 42, 3 bytes
    decoded = ApiVersionsRequest.decode(with_tag, 3)
    assert decoded.unknown_tagged_fields == [(42, b"\x01\x02\x03")]
    assert decoded.encode(3) == with_tag


def test_version_outside_the_schema_is_refused() -> None:
    with pytest.raises(UnsupportedVersionError):
        ApiVersionsRequest().encode(5)


@pytest.mark.parametrize("cut", range(1, 12))
def test_truncated_bodies_raise_decode_error(cut: int) -> None:
    body = ApiVersionsResponse(0, [ApiVersion(18, 0, 4)]).encode(3)
    with pytest.raises(DecodeError):
        ApiVersionsResponse.decode(body[:-cut], 3)


def test_peek_reads_any_header() -> None:
    peek = peek_request(bytes.fromhex("03e7_0063_0000002a".replace("_", "")) + b"junk")
    assert (peek.api_key, peek.api_version, peek.correlation_id) == (999, 99, 42)


def test_frame_reader_splits_a_stream() -> None:
    frames = [encode_request(ApiVersionsRequest(), v, v) for v in range(5)]
    stream = b"".join(frames)
    reader = FrameReader(max_frame_size=1024)
    out = []
    for i in range(0, len(stream), 3):  # arrives in 3-byte pieces
        reader.feed(stream[i : i + 3])
        while (frame := reader.next_frame()) is not None:
            out.append(frame)
    assert out == [f[4:] for f in frames]
    assert reader.buffered() == 0


def test_frame_reader_refuses_a_huge_size_before_buffering_it() -> None:
    reader = FrameReader(max_frame_size=100)
    reader.feed(b"\x7f\xff\xff\xff")
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()
    negative = FrameReader(max_frame_size=100)
    negative.feed(b"\xff\xff\xff\xfe")
    with pytest.raises(DecodeError):
        negative.next_frame()


class _Region:
    """A stand-in for a file slice: only its length matters to the encoder."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def _fetch_response_with_region(region: _Region) -> FetchResponse:
    partitions = [PartitionData(partition_index=0, records=region), PartitionData(1, records=b"")]
    return FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=partitions)])


def test_a_file_region_travels_as_a_chunk_with_the_frame_size_counting_it() -> None:
    region = _Region(1000)
    response = _fetch_response_with_region(region)
    chunks = encode_response_chunks(response, 4, correlation_id=3)
    head, middle, tail = chunks
    assert middle is region
    assert isinstance(head, bytes) and isinstance(tail, bytes)
    assert int.from_bytes(head[:4], "big") == len(head) - 4 + len(region) + len(tail)
    # With the region's bytes in its place, the frame decodes like any other.
    frame = head + b"\x00" * len(region) + tail
    assert decode_response(frame[4:], ApiKey.FETCH, 4)[1] == _fetch_response_with_region(
        b"\x00" * 1000  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("version", [4, 12])
def test_whole_frame_encoders_refuse_file_regions(version: int) -> None:
    # These used to return a short frame with a wrong size prefix (or raise struct.error).
    response = _fetch_response_with_region(_Region(10))
    with pytest.raises(EncodeError, match="encode_response_chunks"):
        encode_response(response, version, correlation_id=1)
    partition = PartitionProduceData(index=0, records=_Region(10))  # type: ignore[arg-type]
    request = ProduceRequest(topic_data=[TopicProduceData("t", [partition])])
    with pytest.raises(EncodeError, match="file region"):
        encode_request(request, 3, correlation_id=1)
