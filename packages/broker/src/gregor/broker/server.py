"""Broker: one broker process, its services, and their startup and shutdown order.

Handlers reach the services through `ctx.broker`:

- `config`            the validated BrokerConfig
- `broker_id`, `cluster_id`, `broker_epoch` (the czxid of our /brokers/ids registration)
- `metadata_cache`    what the controller's UpdateMetadata requests said
- `replica_manager`   the partitions this broker hosts (logs, leader/follower state)
- `zk`                the KafkaZkClient (gregor.broker.zk)
- `controller`        the controller service of this broker (gregor.broker.controller)
"""

from __future__ import annotations

from gregor.broker.config import BrokerConfig
from gregor.broker.metadata_cache import MetadataCache


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.cluster_id = ""
        self.broker_epoch = -1
        self.metadata_cache = MetadataCache(config.broker_id)
