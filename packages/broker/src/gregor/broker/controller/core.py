"""What the controller's helpers (`leadership`, `reassignment`) use of the controller.

They run inside the controller's event loop and share its state: the context, the state
machines, the request batch, ZooKeeper. `Controller` provides all of it; they see only this
view, so neither imports the controller.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gregor.broker.controller.batch import RequestBatch
from gregor.broker.controller.context import ControllerContext
from gregor.broker.controller.deletion import TopicDeletionManager
from gregor.broker.controller.events import Event
from gregor.broker.controller.partitions import PartitionStateMachine
from gregor.broker.controller.replicas import ReplicaStateMachine
from gregor.broker.controller.settings import ControllerSettings
from gregor.broker.zk.client import KafkaZkClient
from gregor.broker.zk.znodes import TopicPartition


class ControllerCore(Protocol):
    zk: KafkaZkClient
    settings: ControllerSettings
    context: ControllerContext
    batch: RequestBatch
    partitions: PartitionStateMachine
    replicas: ReplicaStateMachine
    deletion: TopicDeletionManager

    @property
    def is_active(self) -> bool: ...

    def put(self, event: Event) -> None:
        """Queue an event for the controller's loop."""

    def send_update_metadata(
        self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition]
    ) -> None: ...
