"""Serializers and deserializers: bytes (the default), str, JSON, and pluggable ones.

A serializer is any callable `(value, topic) -> bytes | None` or `(value) -> bytes | None`;
a deserializer is `(data, topic) -> value` or `(data) -> value`. Built-ins are chosen by name
in the config (`"value.serializer": "json"`). `None` passes through every built-in unchanged:
a null key or value (a tombstone) stays null.

The bytes serializer is resolved to None, meaning "no call at all": the hot path then skips a
Python call per record, and the record builder rejects what is not bytes.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from gregor.client.config import ConfigError

Serialize = Callable[[Any, str], bytes | None]
Deserialize = Callable[[bytes | None, str], Any]


def _str_serialize(value: Any, topic: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"the str serializer takes str, not {type(value).__name__}")
    return value.encode()


def _json_serialize(value: Any, topic: str) -> bytes | None:
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _str_deserialize(data: bytes | None, topic: str) -> str | None:
    return None if data is None else data.decode()


def _json_deserialize(data: bytes | None, topic: str) -> Any:
    return None if data is None else json.loads(data)


_SERIALIZERS: dict[str, Serialize | None] = {
    "bytes": None,
    "str": _str_serialize,
    "json": _json_serialize,
}
_DESERIALIZERS: dict[str, Deserialize | None] = {
    "bytes": None,
    "str": _str_deserialize,
    "json": _json_deserialize,
}


def _two_arguments(func: Callable[..., Any], name: str) -> Callable[[Any, str], Any]:
    """Adapt a one-argument callable to the (value, topic) shape."""
    if not callable(func):
        raise ConfigError(f"{name} must be a callable or one of bytes, str, json")
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: assume one argument
        return lambda value, topic: func(value)
    # Two required positional parameters (or *args) take the topic too; optional ones are
    # left alone (bytes.decode's second parameter is an encoding, not a topic).
    required = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(required) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return func
    return lambda value, topic: func(value)


def serializer(spec: Any, name: str = "serializer") -> Serialize | None:
    """The serializer a config value names (None: bytes pass through unchanged)."""
    if isinstance(spec, str):
        return _SERIALIZERS[spec]
    return _two_arguments(spec, name)


def deserializer(spec: Any, name: str = "deserializer") -> Deserialize | None:
    """The deserializer a config value names (None: bytes are returned as they are)."""
    if isinstance(spec, str):
        return _DESERIALIZERS[spec]
    return _two_arguments(spec, name)
