"""The group coordinator: consumer groups (the classic rebalance protocol) and their
committed offsets, kept in `__consumer_offsets`.

- `coordinator`: the protocol, request by request, with Kafka's errors;
- `manager`: the groups this broker coordinates, loading and unloading partitions, writes,
  offset expiry;
- `group`, `member`, `state`: a group's bookkeeping and its state machine;
- `records`: the group state as `__consumer_offsets` records and back;
- `storage`: appends and reads of `__consumer_offsets` through the replica manager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gregor.broker.coordinator.group.config import GroupConfig
from gregor.broker.coordinator.group.coordinator import GroupCoordinator
from gregor.broker.coordinator.group.storage import ReplicatedOffsetsTopic
from gregor.broker.topic_names import CONSUMER_OFFSETS

if TYPE_CHECKING:
    from gregor.broker.server import Broker

__all__ = ["GroupConfig", "GroupCoordinator", "broker_group_coordinator"]


def broker_group_coordinator(broker: Broker) -> GroupCoordinator:
    """The broker's group coordinator, on its replica manager and metadata cache."""
    config = GroupConfig.from_broker(broker.config)

    async def existing_partitions() -> int:
        return len(await broker.zk.get_partitions_for_topic(CONSUMER_OFFSETS))

    coordinator = GroupCoordinator(
        broker.broker_id,
        config,
        ReplicatedOffsetsTopic(broker.replica_manager),
        existing_partitions=existing_partitions,
    )
    broker.replica_manager.leadership_listeners.append(coordinator.on_leadership_change)
    return coordinator
