"""The group coordinator's settings, taken from the broker's configuration."""

from __future__ import annotations

import attrs

from gregor.broker.config import BrokerConfig


@attrs.frozen(slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    # offsets
    offsets_topic_partitions: int = 50
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    load_buffer_size: int = 5 * 1024 * 1024
    # KIP-848 consumer groups
    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_max_size: int = 2**31 - 1

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> GroupConfig:
        return cls(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            max_size=config.group_max_size,
            offsets_topic_partitions=config.offsets_topic_num_partitions,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offset_commit_timeout_ms=config.offsets_commit_timeout_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            load_buffer_size=config.offsets_load_buffer_size,
            consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            consumer_assignors=config.group_consumer_assignors,
            consumer_max_size=config.group_consumer_max_size,
        )
