"""Configuration of logs and of the log manager, under Kafka's names and with Kafka's defaults.

`LogConfig` holds the topic-level settings (`segment.bytes`, `retention.ms`, ...). A broker
builds its defaults from its own `log.*` server settings with `LogConfig.from_server_properties`
and applies a topic's overrides on top with `from_properties(overrides, defaults=...)`.
`LogManagerConfig` holds the broker-level settings of the storage engine (`log.dirs`, the
intervals of the background tasks, the cleaner's settings).

Every value is validated when it is loaded; an error names the key, the value and the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs

from gregor.protocol.errors import InvalidConfigError

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1
LOG_OVERHEAD: Final = 12

HOUR_MS: Final = 60 * 60 * 1000
DAY_MS: Final = 24 * HOUR_MS

CLEANUP_DELETE: Final = "delete"
CLEANUP_COMPACT: Final = "compact"
TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# Kafka topic settings that a broker accepts and that the storage engine does not act on; they
# are kept (as strings) so that DescribeConfigs can show them and the broker can read them.
PASSTHROUGH_KEYS: Final = frozenset(
    {
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "message.downconversion.enable",
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "remote.storage.enable",
        "local.retention.ms",
        "local.retention.bytes",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
    }
)

T = TypeVar("T")


def _fail(key: str, value: object, rule: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value!r} for configuration {key}: {rule}")


def _parse_int(key: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool):
        raise _fail(key, value, "must be an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            raise _fail(key, value, "must be an integer") from None
    else:
        raise _fail(key, value, "must be an integer")
    if number < low:
        raise _fail(key, value, f"must be at least {low}")
    if number > high:
        raise _fail(key, value, f"must be at most {high}")
    return number


def _parse_float(key: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _fail(key, value, "must be a number")
    try:
        number = float(value)
    except ValueError:
        raise _fail(key, value, "must be a number") from None
    if math.isnan(number) or not low <= number <= high:
        raise _fail(key, value, f"must be between {low} and {high}")
    return number


def _parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _fail(key, value, "must be true or false")


def _parse_choice(key: str, value: object, choices: Iterable[str]) -> str:
    options = tuple(choices)
    if isinstance(value, str) and value.strip() in options:
        return value.strip()
    raise _fail(key, value, f"must be one of {', '.join(options)}")


def _parse_policy(key: str, value: object) -> frozenset[str]:
    items: list[str]
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, Iterable):
        items = [str(item).strip() for item in value]
    else:
        raise _fail(key, value, "must be a list of compact, delete")
    if not items or any(item not in (CLEANUP_COMPACT, CLEANUP_DELETE) for item in items):
        raise _fail(key, value, "must be a non-empty list of compact, delete")
    return frozenset(items)


# Each setting: (attribute name, parser). The parser gets the Kafka key and the raw value.
_Parser = Callable[[str, object], Any]


def _int(low: int, high: int = INT_MAX) -> _Parser:
    return lambda key, value: _parse_int(key, value, low, high)


def _long(low: int) -> _Parser:
    return lambda key, value: _parse_int(key, value, low, LONG_MAX)


def _choice(choices: Iterable[str]) -> _Parser:
    options = tuple(choices)
    return lambda key, value: _parse_choice(key, value, options)


_LOG_SETTINGS: Final[dict[str, tuple[str, _Parser]]] = {
    "segment.bytes": ("segment_bytes", _int(14)),
    "segment.ms": ("segment_ms", _long(1)),
    "segment.jitter.ms": ("segment_jitter_ms", _long(0)),
    "segment.index.bytes": ("segment_index_bytes", _int(4)),
    "index.interval.bytes": ("index_interval_bytes", _int(0)),
    "retention.ms": ("retention_ms", _long(-1)),
    "retention.bytes": ("retention_bytes", _long(-(2**63))),
    "cleanup.policy": ("cleanup_policy", _parse_policy),
    "min.cleanable.dirty.ratio": (
        "min_cleanable_dirty_ratio",
        lambda key, value: _parse_float(key, value, 0.0, 1.0),
    ),
    "delete.retention.ms": ("delete_retention_ms", _long(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long(1)),
    "max.message.bytes": ("max_message_bytes", _int(0)),
    "flush.messages": ("flush_messages", _long(1)),
    "flush.ms": ("flush_ms", _long(0)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long(0)),
    "message.timestamp.type": ("message_timestamp_type", _choice(TIMESTAMP_TYPES)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _long(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _long(0)),
    "preallocate": ("preallocate", _parse_bool),
    "compression.type": ("compression_type", _choice(COMPRESSION_TYPES)),
    "min.insync.replicas": ("min_insync_replicas", _int(1)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _parse_bool),
}


@attrs.frozen(slots=True)
class LogConfig:
    """The settings of one log (a topic-partition), as Kafka's topic configuration."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    cleanup_policy: frozenset[str] = frozenset({CLEANUP_DELETE})
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + LOG_OVERHEAD
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    preallocate: bool = False
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    # Settings Kafka accepts that the storage engine keeps without acting on them.
    passthrough: Mapping[str, str] = attrs.field(factory=dict, eq=False)
    # Derived once: the append path reads them on every call.
    compact: bool = attrs.field(init=False, eq=False)
    delete: bool = attrs.field(init=False, eq=False)
    log_append_time: bool = attrs.field(init=False, eq=False)
    # Appends may take the fast path: nothing to check in the records (compaction's keys),
    # no timestamps to set or bound. A batch over `fast_append_max_bytes` takes the full
    # path, which says which limit it broke.
    fast_appends: bool = attrs.field(init=False, eq=False)
    fast_append_max_bytes: int = attrs.field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "compact", CLEANUP_COMPACT in self.cleanup_policy)
        object.__setattr__(self, "delete", CLEANUP_DELETE in self.cleanup_policy)
        object.__setattr__(self, "log_append_time", self.message_timestamp_type == "LogAppendTime")
        object.__setattr__(
            self,
            "fast_appends",
            not self.compact
            and not self.log_append_time
            and self.message_timestamp_before_max_ms == LONG_MAX
            and self.message_timestamp_after_max_ms == LONG_MAX,
        )
        object.__setattr__(
            self, "fast_append_max_bytes", min(self.max_message_bytes, self.segment_bytes)
        )

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, object], defaults: LogConfig | None = None
    ) -> LogConfig:
        """A config from Kafka topic settings (`{"segment.bytes": "1048576", ...}`).

        Keys not given keep their value in `defaults` (Kafka's defaults when None). An unknown
        key or an invalid value raises `InvalidConfigError` naming the key, value and rule.
        """
        changes: dict[str, Any] = {}
        passthrough = dict((defaults or _DEFAULT).passthrough)
        for key, value in properties.items():
            setting = _LOG_SETTINGS.get(key)
            if setting is not None:
                name, parse = setting
                changes[name] = parse(key, value)
            elif key in PASSTHROUGH_KEYS:
                passthrough[key] = str(value)
            else:
                raise InvalidConfigError(f"Unknown topic configuration {key!r} (value {value!r})")
        return attrs.evolve(defaults or _DEFAULT, passthrough=passthrough, **changes)

    @classmethod
    def from_server_properties(cls, properties: Mapping[str, object]) -> LogConfig:
        """The default topic config of a broker, from its `log.*` server settings."""
        topic: dict[str, object] = {}
        for topic_key, synonyms in SERVER_SYNONYMS.items():
            for server_key, scale in synonyms:
                if server_key in properties:
                    value = properties[server_key]
                    if scale != 1:
                        value = _parse_int(server_key, value, -1, LONG_MAX // scale)
                        value = value * scale if value >= 0 else value
                    # Checked here too, so that an error names the key the operator wrote.
                    topic[topic_key] = _LOG_SETTINGS[topic_key][1](server_key, value)
                    break
        return cls.from_properties(topic)

    def to_properties(self) -> dict[str, str]:
        """Every setting under its Kafka name, as strings (DescribeConfigs' view)."""
        out: dict[str, str] = {}
        for key, (name, _parse) in _LOG_SETTINGS.items():
            value = getattr(self, name)
            if isinstance(value, bool):
                out[key] = "true" if value else "false"
            elif isinstance(value, frozenset):
                out[key] = ",".join(sorted(value))
            else:
                out[key] = str(value)
        out.update(self.passthrough)
        return out


_DEFAULT: Final = LogConfig()

# Topic setting -> the broker settings that give its default, first match wins, with the
# factor that turns the broker unit into the topic unit (log.retention.hours -> ms).
SERVER_SYNONYMS: Final[dict[str, tuple[tuple[str, int], ...]]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", HOUR_MS),
    ),
    "retention.bytes": (("log.retention.bytes", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "preallocate": (("log.preallocate", 1),),
    "compression.type": (("compression.type", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
}


def _dirs(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        dirs = tuple(item.strip() for item in value.split(",") if item.strip())
    elif isinstance(value, Iterable):
        dirs = tuple(str(item) for item in value)
    else:
        dirs = ()
    if not dirs:
        raise _fail(key, value, "must be a non-empty comma-separated list of directories")
    if len(set(dirs)) != len(dirs):
        raise _fail(key, value, "must not name a directory twice")
    return dirs


_MANAGER_SETTINGS: Final[dict[str, tuple[str, _Parser]]] = {
    "log.dirs": ("log_dirs", _dirs),
    "log.dir": ("log_dirs", _dirs),
    "broker.id": ("broker_id", _int(-1)),
    "num.recovery.threads.per.data.dir": ("num_recovery_threads_per_data_dir", _int(1)),
    "log.flush.scheduler.interval.ms": ("flush_scheduler_interval_ms", _long(1)),
    "log.flush.offset.checkpoint.interval.ms": ("flush_offset_checkpoint_interval_ms", _int(1)),
    "log.flush.start.offset.checkpoint.interval.ms": (
        "flush_start_offset_checkpoint_interval_ms",
        _int(1),
    ),
    "replica.high.watermark.checkpoint.interval.ms": (
        "high_watermark_checkpoint_interval_ms",
        _long(1),
    ),
    "log.retention.check.interval.ms": ("retention_check_interval_ms", _long(1)),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", _int(1)),
    "producer.id.expiration.check.interval.ms": (
        "producer_id_expiration_check_interval_ms",
        _int(1),
    ),
    "transaction.max.timeout.ms": ("max_transaction_timeout_ms", _int(1)),
    "log.cleaner.enable": ("cleaner_enable", _parse_bool),
    "log.cleaner.threads": ("cleaner_threads", _int(0)),
    "log.cleaner.io.max.bytes.per.second": (
        "cleaner_io_max_bytes_per_second",
        lambda key, value: _parse_float(key, value, 1.0, math.inf),
    ),
    "log.cleaner.dedupe.buffer.size": ("cleaner_dedupe_buffer_size", _long(1024)),
    "log.cleaner.io.buffer.size": ("cleaner_io_buffer_size", _int(4096)),
    "log.cleaner.backoff.ms": ("cleaner_backoff_ms", _long(0)),
}


@attrs.frozen(slots=True)
class LogManagerConfig:
    """Broker-level settings of the storage engine, under Kafka's server config names."""

    log_dirs: tuple[str, ...] = ("/tmp/kafka-logs",)
    broker_id: int = -1
    num_recovery_threads_per_data_dir: int = 1
    flush_scheduler_interval_ms: int = LONG_MAX
    flush_offset_checkpoint_interval_ms: int = 60_000
    flush_start_offset_checkpoint_interval_ms: int = 60_000
    high_watermark_checkpoint_interval_ms: int = 5_000
    retention_check_interval_ms: int = 5 * 60_000
    producer_id_expiration_ms: int = DAY_MS
    producer_id_expiration_check_interval_ms: int = 10 * 60_000
    max_transaction_timeout_ms: int = 15 * 60_000
    cleaner_enable: bool = True
    cleaner_threads: int = 1
    cleaner_io_max_bytes_per_second: float = math.inf
    cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    cleaner_io_buffer_size: int = 512 * 1024
    cleaner_backoff_ms: int = 15_000

    @classmethod
    def from_server_properties(cls, properties: Mapping[str, object]) -> LogManagerConfig:
        """The storage settings among a broker's server settings; other keys are ignored.

        `log.dirs` wins over `log.dir`, as in Kafka.
        """
        changes: dict[str, Any] = {}
        for key, (name, parse) in _MANAGER_SETTINGS.items():
            if key in properties and not (key == "log.dir" and "log.dirs" in properties):
                changes[name] = parse(key, properties[key])
        return cls(**changes)
