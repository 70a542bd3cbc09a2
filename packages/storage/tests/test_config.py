"""LogConfig and LogManagerConfig: Kafka's names, defaults and validation."""

from __future__ import annotations

import math

import pytest

from gregor.protocol.errors import InvalidConfigError
from gregor.storage.config import LONG_MAX, LogConfig, LogManagerConfig


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.segment_index_bytes == 10 * 1024 * 1024
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == frozenset({"delete"})
    assert config.min_cleanable_dirty_ratio == 0.5
    assert config.delete_retention_ms == 24 * 3600 * 1000
    assert config.max_compaction_lag_ms == LONG_MAX
    assert config.max_message_bytes == 1024 * 1024 + 12
    assert config.flush_messages == LONG_MAX
    assert config.flush_ms == LONG_MAX
    assert config.file_delete_delay_ms == 60_000
    assert config.message_timestamp_type == "CreateTime"
    assert not config.preallocate


def test_from_properties_parses_kafka_names() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "cleanup.policy": "compact, delete",
            "min.cleanable.dirty.ratio": "0.25",
            "preallocate": "TRUE",
            "message.timestamp.type": "LogAppendTime",
            "flush.messages": 10,
        }
    )
    assert config.segment_bytes == 1048576
    assert config.retention_ms == -1
    assert config.compact and config.delete
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.preallocate
    assert config.log_append_time
    assert config.flush_messages == 10


def test_overrides_apply_on_top_of_defaults() -> None:
    broker = LogConfig.from_properties({"segment.bytes": "1000", "retention.bytes": "5000"})
    topic = LogConfig.from_properties({"retention.bytes": "7000"}, defaults=broker)
    assert (topic.segment_bytes, topic.retention_bytes) == (1000, 7000)


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("segment.bytes", "13", "at least 14"),
        ("segment.bytes", "ten", "must be an integer"),
        ("segment.bytes", str(2**31), "at most"),
        ("retention.ms", "-2", "at least -1"),
        ("min.cleanable.dirty.ratio", "1.5", "between 0.0 and 1.0"),
        ("cleanup.policy", "compact,forever", "compact, delete"),
        ("cleanup.policy", "", "non-empty"),
        ("message.timestamp.type", "WallClock", "CreateTime, LogAppendTime"),
        ("preallocate", "yes", "true or false"),
        ("max.compaction.lag.ms", "0", "at least 1"),
    ],
)
def test_invalid_values_name_key_value_and_rule(key: str, value: str, rule: str) -> None:
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig.from_properties({key: value})
    message = str(excinfo.value)
    assert key in message and repr(value) in message and rule in message


def test_unknown_key_is_rejected_and_passthrough_kept() -> None:
    with pytest.raises(InvalidConfigError, match=r"segment\.byte"):
        LogConfig.from_properties({"segment.byte": "1"})
    config = LogConfig.from_properties({"message.downconversion.enable": "false"})
    assert config.to_properties()["message.downconversion.enable"] == "false"


def test_server_synonyms_and_units() -> None:
    config = LogConfig.from_server_properties(
        {
            "log.segment.bytes": "2048",
            "log.retention.hours": "2",
            "log.roll.hours": "1",
            "message.max.bytes": "500",
            "log.cleanup.policy": "compact",
            "broker.id": "3",
        }
    )
    assert config.segment_bytes == 2048
    assert config.retention_ms == 2 * 3600 * 1000
    assert config.segment_ms == 3600 * 1000
    assert config.max_message_bytes == 500
    assert config.compact
    # The most precise unit wins, as in Kafka.
    config = LogConfig.from_server_properties({"log.retention.ms": "5", "log.retention.hours": "9"})
    assert config.retention_ms == 5


def test_to_properties_round_trips() -> None:
    config = LogConfig.from_properties({"cleanup.policy": "delete,compact", "segment.ms": "99"})
    assert LogConfig.from_properties(config.to_properties()) == config


def test_log_manager_config() -> None:
    config = LogManagerConfig.from_server_properties(
        {
            "log.dirs": "/a, /b",
            "log.dir": "/ignored",
            "broker.id": "7",
            "log.cleaner.io.max.bytes.per.second": "1048576",
            "log.cleaner.enable": "false",
        }
    )
    assert config.log_dirs == ("/a", "/b")
    assert config.broker_id == 7
    assert config.cleaner_io_max_bytes_per_second == 1048576
    assert not config.cleaner_enable
    assert LogManagerConfig().cleaner_io_max_bytes_per_second == math.inf
    with pytest.raises(InvalidConfigError, match=r"log\.dirs"):
        LogManagerConfig.from_server_properties({"log.dirs": "/a,/a"})
