"""The built-in serializers and deserializers, and adapting user callables."""

from __future__ import annotations

import pytest

from gregor.client.config import ConfigError
from gregor.client.serialization import deserializer, serializer


def test_bytes_is_no_call_at_all() -> None:
    assert serializer("bytes") is None
    assert deserializer("bytes") is None


def test_str_and_json_round_trip_and_keep_null() -> None:
    to_str, from_str = serializer("str"), deserializer("str")
    assert to_str is not None and from_str is not None
    assert to_str("grüß", "t") == "grüß".encode()
    assert from_str(b"gr\xc3\xbc\xc3\x9f", "t") == "grüß"
    assert to_str(None, "t") is None and from_str(None, "t") is None
    with pytest.raises(TypeError, match="takes str, not int"):
        to_str(5, "t")
    to_json, from_json = serializer("json"), deserializer("json")
    assert to_json is not None and from_json is not None
    assert to_json({"a": [1, "é"]}, "t") == '{"a":[1,"é"]}'.encode()
    assert from_json(b'{"a":[1,2]}', "t") == {"a": [1, 2]}
    assert to_json(None, "t") is None


def test_user_callables_with_one_or_two_arguments() -> None:
    one = serializer(lambda value: value.upper())
    two = serializer(lambda value, topic: topic.encode() + value)
    assert one is not None and two is not None
    assert one(b"ab", "t") == b"AB"
    assert two(b"ab", "t") == b"tab"
    builtin = deserializer(bytes.decode)  # a C method: no inspectable signature needed
    assert builtin is not None and builtin(b"x", "t") == "x"
    with pytest.raises(ConfigError, match="must be a callable"):
        serializer(42)
