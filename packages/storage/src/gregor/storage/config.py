"""Configuration of logs and of the log manager, under Kafka's names and with Kafka's defaults.

`LogConfig` holds the topic-level settings (`segment.bytes`, `retention.ms`, ...). A broker
builds its defaults from its own `log.*` server settings with `LogConfig.from_server_properties`
and applies a topic's overrides on top with `from_properties(overrides, defaults=...)`.
`LogManagerConfig` holds the broker-level settings of the storage engine (`log.dirs`, the
intervals of the background tasks, the cleaner's settings).

Each setting is declared once, as a field with its key, default, parser and doc
(`gregor.storage.settings`); `TOPIC_SETTINGS` and `SERVER_SETTINGS` are what DescribeConfigs
and the configuration reference read. Every value is validated when it is loaded; an error
names the key the operator wrote, the value and the rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import attrs

from gregor.protocol.errors import InvalidConfigError
from gregor.storage.settings import (
    INT_MAX,
    LONG_MAX,
    ConfigType,
    Setting,
    accepted,
    boolean,
    choice,
    declared,
    directories,
    integer,
    long,
    number,
    policy,
    scaled,
    setting,
    to_text,
)

__all__ = ["INT_MAX", "LONG_MAX", "LogConfig", "LogManagerConfig"]

LOG_OVERHEAD: Final = 12

HOUR_MS: Final = 60 * 60 * 1000
DAY_MS: Final = 24 * HOUR_MS

CLEANUP_DELETE: Final = "delete"
CLEANUP_COMPACT: Final = "compact"
TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


# Kafka topic settings that a broker accepts and that the storage engine does not act on; they
# are kept (as strings) so that DescribeConfigs can show them and the broker can read them.
PASSTHROUGH_SETTINGS: Final = {
    s.key: s
    for s in (
        accepted(
            "leader.replication.throttled.replicas",
            ConfigType.LIST,
            "partition:broker pairs (or *) whose replication to out-of-sync followers is held"
            " to the leader's leader.replication.throttled.rate",
        ),
        accepted(
            "follower.replication.throttled.replicas",
            ConfigType.LIST,
            "partition:broker pairs (or *) a follower out of the ISR fetches at no more than"
            " its follower.replication.throttled.rate",
        ),
        accepted(
            "message.downconversion.enable",
            ConfigType.BOOLEAN,
            "whether old fetch versions may get converted batches (kept; they always do)",
        ),
        accepted("message.format.version", ConfigType.STRING, "obsolete in Kafka 3 (kept)"),
        accepted(
            "message.timestamp.difference.max.ms",
            ConfigType.LONG,
            "superseded by message.timestamp.before/after.max.ms (kept)",
        ),
        accepted("remote.storage.enable", ConfigType.BOOLEAN, "tiered storage (kept, not built)"),
        accepted("local.retention.ms", ConfigType.LONG, "tiered storage (kept, not built)"),
        accepted("local.retention.bytes", ConfigType.LONG, "tiered storage (kept, not built)"),
        accepted("compression.gzip.level", ConfigType.INT, "gzip level when recompressing (kept)"),
        accepted("compression.lz4.level", ConfigType.INT, "lz4 level when recompressing (kept)"),
        accepted("compression.zstd.level", ConfigType.INT, "zstd level when recompressing (kept)"),
    )
}
PASSTHROUGH_KEYS: Final = frozenset(PASSTHROUGH_SETTINGS)


@attrs.frozen(slots=True)
class LogConfig:
    """The settings of one log (a topic-partition), as Kafka's topic configuration."""

    segment_bytes: int = setting(
        "segment.bytes", 1024 * 1024 * 1024, integer(14), "a segment file rolls at this size"
    )
    segment_ms: int = setting(
        "segment.ms", 7 * DAY_MS, long(1), "a segment rolls after this long, even if not full"
    )
    segment_jitter_ms: int = setting(
        "segment.jitter.ms", 0, long(0), "up to this much is taken off segment.ms, at random"
    )
    segment_index_bytes: int = setting(
        "segment.index.bytes", 10 * 1024 * 1024, integer(4), "the size of each offset index"
    )
    index_interval_bytes: int = setting(
        "index.interval.bytes", 4096, integer(0), "bytes of batches between index entries"
    )
    retention_ms: int = setting(
        "retention.ms", 7 * DAY_MS, long(-1), "delete segments older than this (-1: never)"
    )
    retention_bytes: int = setting(
        "retention.bytes",
        -1,
        long(-(2**63)),
        "delete the oldest segments while a partition is larger (-1: no limit)",
    )
    cleanup_policy: frozenset[str] = setting(
        "cleanup.policy", frozenset({CLEANUP_DELETE}), policy(), "delete, compact, or both"
    )
    min_cleanable_dirty_ratio: float = setting(
        "min.cleanable.dirty.ratio",
        0.5,
        number(0.0, 1.0),
        "compact once this share of the log is uncompacted",
    )
    delete_retention_ms: int = setting(
        "delete.retention.ms", DAY_MS, long(0), "how long compaction keeps tombstones"
    )
    min_compaction_lag_ms: int = setting(
        "min.compaction.lag.ms", 0, long(0), "a record stays uncompacted at least this long"
    )
    max_compaction_lag_ms: int = setting(
        "max.compaction.lag.ms", LONG_MAX, long(1), "a record is compacted within this long"
    )
    max_message_bytes: int = setting(
        "max.message.bytes",
        1024 * 1024 + LOG_OVERHEAD,
        integer(0),
        "the largest record batch the topic accepts",
    )
    flush_messages: int = setting(
        "flush.messages", LONG_MAX, long(1), "fsync after this many messages"
    )
    flush_ms: int = setting("flush.ms", LONG_MAX, long(0), "fsync after this long")
    file_delete_delay_ms: int = setting(
        "file.delete.delay.ms",
        60_000,
        long(0),
        "a deleted segment's files are removed this long after",
    )
    message_timestamp_type: str = setting(
        "message.timestamp.type",
        "CreateTime",
        choice(*TIMESTAMP_TYPES),
        "CreateTime (the producer's) or LogAppendTime (the broker's)",
    )
    message_timestamp_before_max_ms: int = setting(
        "message.timestamp.before.max.ms",
        LONG_MAX,
        long(0),
        "reject batches whose timestamp is further than this in the past",
    )
    message_timestamp_after_max_ms: int = setting(
        "message.timestamp.after.max.ms",
        LONG_MAX,
        long(0),
        "reject batches whose timestamp is further than this in the future",
    )
    preallocate: bool = setting(
        "preallocate", False, boolean, "preallocate new segment files on disk"
    )
    compression_type: str = setting(
        "compression.type",
        "producer",
        choice(*COMPRESSION_TYPES),
        "producer keeps the producer's codec (the only value acted on: no recompression yet)",
    )
    min_insync_replicas: int = setting(
        "min.insync.replicas",
        1,
        integer(1),
        "acks=all produce fails while fewer replicas are in sync",
    )
    unclean_leader_election_enable: bool = setting(
        "unclean.leader.election.enable",
        False,
        boolean,
        "a replica out of sync may become leader (losing data) when none in sync is alive",
    )
    # Settings Kafka accepts that the storage engine keeps without acting on them.
    passthrough: Mapping[str, str] = attrs.field(factory=dict, eq=False)
    # Derived once: the append path reads them on every call.
    compact: bool = attrs.field(init=False, eq=False)
    delete: bool = attrs.field(init=False, eq=False)
    log_append_time: bool = attrs.field(init=False, eq=False)
    # Appends may be fast appends: nothing to check in the records (compaction's keys), no
    # timestamps to set or bound. A batch over `fast_append_max_bytes` takes the checked
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
            found = _TOPIC.get(key)
            if found is not None:
                name, declaration = found
                changes[name] = declaration.parser(key, value)
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
                        value = scaled(scale)(server_key, value)
                    # Checked here too, so that an error names the key the operator wrote.
                    topic[topic_key] = _TOPIC[topic_key][1].parser(server_key, value)
                    break
        return cls.from_properties(topic)

    def to_properties(self) -> dict[str, str]:
        """Every setting under its Kafka name, as strings (DescribeConfigs' view)."""
        out = {key: to_text(getattr(self, name)) or "" for key, (name, _) in _TOPIC.items()}
        out.update(self.passthrough)
        return out


_DEFAULT: Final = LogConfig()
_TOPIC: Final = declared(LogConfig)

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


@attrs.frozen(slots=True)
class LogManagerConfig:
    """Broker-level settings of the storage engine, under Kafka's server config names."""

    log_dirs: tuple[str, ...] = setting(
        "log.dirs", ("/tmp/kafka-logs",), directories(), "the directories that hold the logs"
    )
    broker_id: int = setting(
        "broker.id", -1, integer(-1), "the broker's id, unique in its cluster (required)"
    )
    num_recovery_threads_per_data_dir: int = setting(
        "num.recovery.threads.per.data.dir",
        1,
        integer(1),
        "threads per log directory that open and recover logs at startup",
    )
    flush_scheduler_interval_ms: int = setting(
        "log.flush.scheduler.interval.ms",
        LONG_MAX,
        long(1),
        "how often logs are checked for a due flush.ms; also flush.ms's broker default",
    )
    flush_offset_checkpoint_interval_ms: int = setting(
        "log.flush.offset.checkpoint.interval.ms",
        60_000,
        integer(1),
        "how often the recovery-point checkpoint is written",
    )
    flush_start_offset_checkpoint_interval_ms: int = setting(
        "log.flush.start.offset.checkpoint.interval.ms",
        60_000,
        integer(1),
        "how often the log-start-offset checkpoint is written",
    )
    high_watermark_checkpoint_interval_ms: int = setting(
        "replica.high.watermark.checkpoint.interval.ms",
        5_000,
        long(1),
        "how often the high-watermark checkpoint is written",
    )
    retention_check_interval_ms: int = setting(
        "log.retention.check.interval.ms",
        5 * 60_000,
        long(1),
        "how often logs are checked for segments to delete",
    )
    producer_id_expiration_ms: int = setting(
        "producer.id.expiration.ms",
        DAY_MS,
        integer(1),
        "an idle producer id's state is dropped after this long",
    )
    producer_id_expiration_check_interval_ms: int = setting(
        "producer.id.expiration.check.interval.ms",
        10 * 60_000,
        integer(1),
        "how often expired producer ids are looked for",
    )
    max_transaction_timeout_ms: int = setting(
        "transaction.max.timeout.ms",
        15 * 60_000,
        integer(1),
        "the longest transaction timeout a producer may ask for",
    )
    cleaner_enable: bool = setting(
        "log.cleaner.enable", True, boolean, "run the log cleaner (compaction)"
    )
    cleaner_threads: int = setting(
        "log.cleaner.threads", 1, integer(0), "threads that compact logs"
    )
    cleaner_io_max_bytes_per_second: float = setting(
        "log.cleaner.io.max.bytes.per.second",
        math.inf,
        number(1.0, math.inf),
        "the cleaner's read and write rate limit",
    )
    cleaner_dedupe_buffer_size: int = setting(
        "log.cleaner.dedupe.buffer.size",
        128 * 1024 * 1024,
        long(1024),
        "memory for the cleaner's key -> offset map, over all threads",
    )
    cleaner_io_buffer_size: int = setting(
        "log.cleaner.io.buffer.size",
        512 * 1024,
        integer(4096),
        "the cleaner's read and write buffers",
    )
    cleaner_backoff_ms: int = setting(
        "log.cleaner.backoff.ms", 15_000, long(0), "how long the cleaner sleeps with nothing to do"
    )

    @classmethod
    def from_server_properties(cls, properties: Mapping[str, object]) -> LogManagerConfig:
        """The storage settings among a broker's server settings; other keys are ignored.

        `log.dirs` wins over `log.dir`, as in Kafka.
        """
        changes: dict[str, Any] = {}
        if "log.dirs" not in properties and LOG_DIR.key in properties:
            changes["log_dirs"] = LOG_DIR.parser(LOG_DIR.key, properties[LOG_DIR.key])
        for key, (name, declaration) in _MANAGER.items():
            if key in properties:
                changes[name] = declaration.parser(key, properties[key])
        return cls(**changes)


_MANAGER: Final = declared(LogManagerConfig)
LOG_DIR: Final = Setting(
    "log.dir",
    directories(),
    "one log directory, when log.dirs is not set",
    None,
    "`/tmp/kafka-logs`",
)


def _synonym_settings() -> dict[str, Setting]:
    """The broker-wide defaults of topic settings, declared by their topic setting."""
    out: dict[str, Setting] = {}
    for topic_key, synonyms in SERVER_SYNONYMS.items():
        topic = _TOPIC[topic_key][1]
        units = {1: "", HOUR_MS: "hours", 60_000: "minutes"}
        for index, (server_key, scale) in enumerate(synonyms):
            unit = f", in {units[scale]}" if scale != 1 else ""
            doc = f"the broker's default for the topic setting {topic_key}{unit}"
            if index + 1 < len(synonyms):
                doc += f" (wins over {synonyms[index + 1][0]})"
                default = None
            else:
                value = getattr(_DEFAULT, _TOPIC[topic_key][0])
                default = to_text(value // scale if scale != 1 else value)
            parser = scaled(scale) if scale != 1 else topic.parser
            shown = f"`{default}`" if default is not None else "none"
            out[server_key] = Setting(server_key, parser, doc, default, shown)
    return out


# The server settings the storage engine reads: the log manager's (and log.dir), and the
# broker-wide defaults of topic settings (`log.retention.hours`, ...).
MANAGER_SETTINGS: Final[dict[str, Setting]] = {
    **{key: declaration for key, (_, declaration) in _MANAGER.items()},
    LOG_DIR.key: LOG_DIR,
}
SYNONYM_SETTINGS: Final = _synonym_settings()
SERVER_SETTINGS: Final = {**SYNONYM_SETTINGS, **MANAGER_SETTINGS}
# Every topic setting: the ones LogConfig acts on and the ones it keeps.
TOPIC_SETTINGS: Final[dict[str, Setting]] = {
    **{key: declaration for key, (_, declaration) in _TOPIC.items()},
    **PASSTHROUGH_SETTINGS,
}
