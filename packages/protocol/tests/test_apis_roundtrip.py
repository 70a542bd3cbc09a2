"""Every request and response of every API survives encode -> decode at every version.

Messages are drawn from the schema itself (gregor_testing.message_strategies), so each
version sees exactly the fields, nullability and tagged fields it has.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.protocol.apis import REQUESTS, RESPONSES
from gregor.protocol.framing import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
)
from gregor.protocol.schema import Message, Request
from gregor_testing.message_strategies import message_settings, messages

CASES = [
    pytest.param(cls, version, id=f"{cls.__name__}-v{version}")
    for key in sorted(REQUESTS)
    for cls in (REQUESTS[key], RESPONSES[key])
    for version in cls.valid_versions
]


@pytest.mark.parametrize(("cls", "version"), CASES)
@message_settings(6)
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_round_trip(
    cls: type[Message], version: int, data: st.DataObject, correlation_id: int
) -> None:
    message = data.draw(messages(cls, version))
    body = message.encode(version)
    decoded = cls.decode(body, version)
    assert decoded == message
    assert decoded.encode(version) == body  # what was read is written back byte for byte

    # The same message inside a whole frame, header and size prefix included.
    if isinstance(message, Request):
        frame = encode_request(message, version, correlation_id, client_id="gregor-test")
        header, request = decode_request(frame[4:], strict=True)
        assert (header.request_api_key, header.request_api_version) == (cls.api_key, version)
        # Header v0 (ControlledShutdown v0 only) has no client id.
        client_id = "gregor-test" if request_header_version(cls.api_key, version) else ""
        assert (header.correlation_id, header.client_id) == (correlation_id, client_id)
        assert request == message
    else:
        frame = encode_response(message, version, correlation_id)
        assert decode_response(frame[4:], cls.api_key, version, strict=True) == (
            correlation_id,
            message,
        )
    assert frame.endswith(body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
