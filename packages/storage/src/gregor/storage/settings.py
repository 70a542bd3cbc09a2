"""How a server setting is declared: once, as an attrs field with its Kafka key, default,
parser and a one-line doc (the shape of gregor-client's config tables).

    retention_ms: int = setting("retention.ms", 7 * DAY_MS, long(-1), "how long ...")

`declared(cls)` reads a config class's settings back by Kafka key. The storage configs
(`gregor.storage.config`) and the broker's (`gregor.broker.config`) are written this way, and
DescribeConfigs and the configuration reference (`docs/configuration.md`) read their names,
types, defaults and docs from there.

A parser gets the key the operator wrote and the raw value (a string from a properties file,
or a Python value) and raises `InvalidConfigError` naming the key, the value and the rule.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs

from gregor.protocol.errors import InvalidConfigError

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1

T = TypeVar("T")


class ConfigType(enum.IntEnum):
    """Kafka's config types, with the ids DescribeConfigs sends."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


def config_error(key: str, value: object, rule: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value!r} for configuration {key}: {rule}")


@attrs.frozen
class Parser:
    """Reads one kind of value; `type` is what DescribeConfigs reports for it."""

    type: ConfigType
    parse: Callable[[str, object], Any]

    def __call__(self, key: str, value: object) -> Any:
        return self.parse(key, value)


@attrs.frozen
class Setting:
    """One declared setting. `default` is Kafka's text form (None: no default of its own);
    `default_doc` says what applies when it is not set, for the reference."""

    key: str
    parser: Parser
    doc: str
    default: str | None
    default_doc: str
    sensitive: bool = False

    @property
    def type(self) -> ConfigType:
        return self.parser.type


_UNSET: Final = object()


def setting(
    key: str,
    default: T,
    parser: Parser,
    doc: str,
    *,
    otherwise: str | None = None,
    sensitive: bool = False,
) -> T:
    """An attrs field for the setting `key` (typed as its default for the checker).

    `otherwise` declares a setting with no default of its own, whose field default is only a
    marker (resolved by the config class); the text says what applies then."""
    text = None if otherwise is not None else to_text(default)
    shown = otherwise if otherwise is not None else f"`{text}`" if text is not None else "none"
    declared = Setting(key, parser, doc, text, shown, sensitive)
    field: T = attrs.field(default=default, metadata={"kafka": declared})
    return field


def declared(cls: type) -> dict[str, tuple[str, Setting]]:
    """A config class's settings: Kafka key -> (attribute name, declaration)."""
    out: dict[str, tuple[str, Setting]] = {}
    for attribute in attrs.fields(cls):
        item = attribute.metadata.get("kafka")
        if item is not None:
            out[item.key] = (attribute.name, item)
    return out


def to_text(value: object) -> str | None:
    """A value as Kafka writes it in properties and DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, frozenset):
        return ",".join(sorted(str(item) for item in value))
    if isinstance(value, tuple | list):
        return ",".join(str(item) for item in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


# -- parsers ------------------------------------------------------------------------------


def _parse_int(key: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool):
        raise config_error(key, value, "must be an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            raise config_error(key, value, "must be an integer") from None
    else:
        raise config_error(key, value, "must be an integer")
    if not low <= number <= high:
        if high not in (INT_MAX, LONG_MAX) and low >= 0:
            raise config_error(key, value, f"must be in [{low}, {high}]")
        bound = f"at least {low}" if number < low else f"at most {high}"
        raise config_error(key, value, f"must be {bound}")
    return number


def integer(low: int, high: int = INT_MAX) -> Parser:
    """A 32-bit integer (Kafka's INT) in [low, high]."""
    return Parser(ConfigType.INT, lambda key, value: _parse_int(key, value, low, high))


def long(low: int, high: int = LONG_MAX) -> Parser:
    """A 64-bit integer (Kafka's LONG) in [low, high]."""
    return Parser(ConfigType.LONG, lambda key, value: _parse_int(key, value, low, high))


def short(low: int) -> Parser:
    """A 16-bit integer (Kafka's SHORT), at least `low`."""
    return Parser(ConfigType.SHORT, lambda key, value: _parse_int(key, value, low, 32767))


def scaled(unit_ms: int) -> Parser:
    """A duration in a coarser unit (hours, minutes), in milliseconds; -1 stays -1."""

    def parse(key: str, value: object) -> int:
        number = _parse_int(key, value, -1, LONG_MAX // unit_ms)
        return number * unit_ms if number >= 0 else number

    return Parser(ConfigType.INT, parse)


def number(low: float, high: float) -> Parser:
    """A float (Kafka's DOUBLE) in [low, high]."""

    def parse(key: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise config_error(key, value, "must be a number")
        try:
            result = float(value)
        except ValueError:
            raise config_error(key, value, "must be a number") from None
        if math.isnan(result) or not low <= result <= high:
            raise config_error(key, value, f"must be between {low} and {high}")
        return result

    return Parser(ConfigType.DOUBLE, parse)


def _parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise config_error(key, value, "must be true or false")


boolean: Final = Parser(ConfigType.BOOLEAN, _parse_bool)


def choice(*options: str) -> Parser:
    """One of these strings (as written, case-sensitive as in Kafka)."""

    def parse(key: str, value: object) -> str:
        if isinstance(value, str) and value.strip() in options:
            return value.strip()
        raise config_error(key, value, f"must be one of {', '.join(options)}")

    return Parser(ConfigType.STRING, parse)


string: Final = Parser(ConfigType.STRING, lambda key, value: str(value).strip())
optional_string: Final = Parser(ConfigType.STRING, lambda key, value: str(value).strip() or None)
# A secret: DescribeConfigs reports it as sensitive, with no value.
password: Final = Parser(ConfigType.PASSWORD, optional_string.parse)


def accepted(key: str, kind: ConfigType, doc: str) -> Setting:
    """A setting accepted without effect: kept as given, unchecked, with no default."""
    return Setting(key, Parser(kind, lambda key, value: str(value)), doc, None, "none")


def _items(key: str, value: object) -> list[str]:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, Iterable):
        return [str(item).strip() for item in value]
    raise config_error(key, value, "must be a comma-separated list")


def policy() -> Parser:
    """cleanup.policy: a non-empty list of compact, delete."""

    def parse(key: str, value: object) -> frozenset[str]:
        items = _items(key, value)
        if not items or any(item not in ("compact", "delete") for item in items):
            raise config_error(key, value, "must be a non-empty list of compact, delete")
        return frozenset(items)

    return Parser(ConfigType.LIST, parse)


def directories() -> Parser:
    """A non-empty list of distinct directories (log.dirs)."""

    def parse(key: str, value: object) -> tuple[str, ...]:
        dirs = tuple(_items(key, value)) if isinstance(value, str | Iterable) else ()
        if not dirs:
            raise config_error(
                key, value, "must be a non-empty comma-separated list of directories"
            )
        if len(set(dirs)) != len(dirs):
            raise config_error(key, value, "must not name a directory twice")
        return dirs

    return Parser(ConfigType.LIST, parse)
