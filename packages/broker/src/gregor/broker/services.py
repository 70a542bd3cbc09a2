"""The services request handlers use: what `RequestContext.services` carries.

Each is the component itself or the narrow view of it a handler needs, never the broker
that holds them all: handlers import this module, and nothing here imports the server. The
broker's wiring (`gregor.broker.server`) builds one `Services` and hands it to the socket
server. Services that exist only once the broker runs (the controller, the cluster id, the
broker epoch) are reached through callables and raise until then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs

from gregor.broker.authorization import Authorizer
from gregor.broker.config import BrokerConfig
from gregor.broker.controller.deletion import TopicDeletionManager
from gregor.broker.controller.events import ApiError, ElectionType
from gregor.broker.coordinator.group import GroupCoordinator
from gregor.broker.coordinator.transaction import TransactionCoordinator
from gregor.broker.fetch_sessions import FetchSessionCache
from gregor.broker.local_logs import LocalLogs
from gregor.broker.metadata_cache import MetadataCache
from gregor.broker.metrics import Metrics
from gregor.broker.producer_ids import ProducerIds
from gregor.broker.quotas import ClientQuotas
from gregor.broker.replica_manager import ReplicaManager
from gregor.broker.replication_quotas import ReplicationQuotas
from gregor.broker.topic_creation import TopicCreator
from gregor.broker.txn_verification import TxnVerifier
from gregor.broker.zk import KafkaZkClient, ReplicaAssignment, TopicPartition


class ControllerAdmin(Protocol):
    """What the admin handlers ask of this broker's controller service."""

    @property
    def is_active(self) -> bool: ...
    @property
    def deletion(self) -> TopicDeletionManager: ...
    async def elect_leaders(
        self, partitions: set[TopicPartition], election_type: ElectionType
    ) -> dict[TopicPartition, int | ApiError]: ...
    async def alter_partition_reassignments(
        self, reassignments: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, ApiError] | ApiError: ...
    async def list_partition_reassignments(
        self, partitions: set[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment] | ApiError: ...
    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> set[TopicPartition]: ...


@attrs.frozen(slots=True, eq=False)
class Services:
    config: BrokerConfig
    metrics: Metrics
    zk: KafkaZkClient
    metadata_cache: MetadataCache
    local_logs: LocalLogs
    replica_manager: ReplicaManager
    fetch_sessions: FetchSessionCache
    group_coordinator: GroupCoordinator
    topic_creator: TopicCreator
    producer_ids: ProducerIds
    transaction_coordinator: TransactionCoordinator
    txn_verifier: TxnVerifier
    quotas: ClientQuotas
    replication_quotas: ReplicationQuotas
    authorizer: Authorizer
    _controller: Callable[[], ControllerAdmin]
    _cluster_id: Callable[[], str]
    _broker_epoch: Callable[[], int]

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def controller(self) -> ControllerAdmin:
        return self._controller()

    @property
    def cluster_id(self) -> str:
        return self._cluster_id()

    @property
    def broker_epoch(self) -> int:
        """The czxid of our registration, -1 before it; it changes with each new session."""
        return self._broker_epoch()
