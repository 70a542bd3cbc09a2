"""gregor-client: Kafka producer, consumer and admin client, sync and async.

    from gregor.client import Producer, Consumer, AdminClient
    from gregor.client import AsyncProducer, AsyncConsumer, AsyncAdminClient

Each takes a config dict with Kafka's property names. The sync clients run their I/O on a
background thread; the async ones run natively under trio, and serve asyncio through a
thread-safe bridge. `ProducerConfig`, `ConsumerConfig` and `AdminConfig` check such a dict
without connecting (`from_dict` raises ConfigError naming the key; `knows(key)`).

The rest of the public API: `gregor.client.admin` (configs, ACLs, quotas, groups), the
errors in `gregor.protocol.errors` (gregor-protocol comes with gregor-client), and for
programs built on gregor-client (gregor-mirror, gregor-etl) `gregor.client.exporter`
(Prometheus) and `gregor.client.logs` (`log.format=json`). Anything else is internal.
"""

from gregor.client.admin import AdminClient, NewTopic
from gregor.client.admin.aio import AsyncAdminClient
from gregor.client.config import AdminConfig, ConfigError, ConsumerConfig, ProducerConfig
from gregor.client.consumer import Consumer, ConsumerRecord
from gregor.client.consumer.aio import AsyncConsumer
from gregor.client.consumer.batches import FetchedBatch
from gregor.client.producer import Producer, RecordFuture
from gregor.client.producer.aio import AsyncProducer, AsyncRecordFuture
from gregor.client.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)
from gregor.protocol.records import TimestampType

__all__ = [
    "AdminClient",
    "AdminConfig",
    "AsyncAdminClient",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncRecordFuture",
    "ConfigError",
    "Consumer",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "FetchedBatch",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "ProducerConfig",
    "RecordFuture",
    "RecordMetadata",
    "TimestampType",
    "TopicPartition",
]
