"""The transaction coordinator's settings, taken from the broker's configuration."""

from __future__ import annotations

import attrs

from gregor.broker.config import BrokerConfig


@attrs.frozen(slots=True)
class TransactionConfig:
    state_log_partitions: int = 50
    max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    abort_timed_out_interval_ms: int = 10_000
    remove_expired_interval_ms: int = 3_600_000
    load_buffer_size: int = 5 * 1024 * 1024
    # How long a write to __transaction_state may wait for the ISR (Kafka: request.timeout.ms).
    append_timeout_ms: int = 30_000
    # How long the marker channel waits before sending to a partition it could not reach.
    marker_retry_backoff_ms: int = 100
    # How long AddPartitionsToTxn/AddOffsetsToTxn wait for the previous transaction of their
    # id to complete (its markers and CompleteCommit/CompleteAbort) before they answer
    # CONCURRENT_TRANSACTIONS.
    completion_wait_ms: int = 1_000

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> TransactionConfig:
        return cls(
            state_log_partitions=config.transaction_state_log_num_partitions,
            max_timeout_ms=config.log_manager_config.max_transaction_timeout_ms,
            transactional_id_expiration_ms=config.transactional_id_expiration_ms,
            abort_timed_out_interval_ms=(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            ),
            remove_expired_interval_ms=(
                config.transaction_remove_expired_transaction_cleanup_interval_ms
            ),
            load_buffer_size=config.transaction_state_log_load_buffer_size,
        )
