"""A field set in a version that lacks it: Kafka's rule.

An ignorable field is dropped; any other field that holds something but its default fails
the encoding with UNSUPPORTED_VERSION, naming the field and the version, so a message
never silently means less than it says.
"""

from __future__ import annotations

import pytest

from gregor.protocol.apis.join_group import JoinGroupRequest
from gregor.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from gregor.protocol.apis.produce import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from gregor.protocol.errors import ErrorCode, UnsupportedVersionError
from gregor.protocol.framing import encode_request


def test_a_field_the_version_lacks_is_refused_when_set() -> None:
    request = MetadataRequest(topics=None, include_cluster_authorized_operations=True)
    assert MetadataRequest.decode(request.encode(10), 10) == request
    with pytest.raises(UnsupportedVersionError) as raised:
        request.encode(11)
    assert raised.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert str(raised.value) == (
        "MetadataRequest v11: MetadataRequest.include_cluster_authorized_operations is set, "
        "but this version lacks it"
    )


def test_its_default_is_not_a_setting() -> None:
    request = MetadataRequest(topics=None)  # include_cluster_authorized_operations=False
    assert MetadataRequest.decode(request.encode(12), 12) == request


def test_nested_fields_are_refused_too() -> None:
    request = JoinGroupRequest(group_id="g", member_id="", group_instance_id="static-1")
    request.encode(5)
    with pytest.raises(UnsupportedVersionError, match=r"JoinGroupRequest v4: .*group_instance_id"):
        request.encode(4)
    wanted = MetadataRequest(allow_auto_topic_creation=False, topics=[MetadataRequestTopic()])
    with pytest.raises(UnsupportedVersionError, match="allow_auto_topic_creation"):
        encode_request(wanted, 3, correlation_id=1)


def test_ignorable_fields_are_dropped() -> None:
    partition = PartitionProduceResponse(
        index=0,
        error_code=ErrorCode.INVALID_RECORD,
        record_errors=[BatchIndexAndErrorMessage(1, "no key")],
        error_message="no key",
    )
    response = ProduceResponse([TopicProduceResponse("t", [partition])], throttle_time_ms=5)
    old = ProduceResponse.decode(response.encode(0), 0)
    dropped = old.responses[0].partition_responses[0]
    assert (dropped.record_errors, dropped.error_message, old.throttle_time_ms) == ([], None, 0)
    assert dropped.error_code == ErrorCode.INVALID_RECORD


def test_tagged_fields_are_refused_where_a_version_has_no_tags() -> None:
    request = MetadataRequest(topics=None)
    request.unknown_tagged_fields = [(7, b"x")]
    request.encode(9)
    with pytest.raises(UnsupportedVersionError, match="tagged fields"):
        request.encode(8)
