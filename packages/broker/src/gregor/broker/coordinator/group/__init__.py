"""The group coordinator: consumer groups (the classic rebalance protocol) and their
committed offsets, kept in `__consumer_offsets`.

- `coordinator`: the protocol, request by request, with Kafka's errors;
- `manager`: the groups this broker coordinates, loading and unloading partitions, writes,
  offset expiry;
- `group`, `member`, `state`: a group's bookkeeping and its state machine;
- `records`: the group state as `__consumer_offsets` records and back;
- `storage`: appends and reads of `__consumer_offsets` through the replica manager.
"""

from gregor.broker.coordinator.group.config import GroupConfig
from gregor.broker.coordinator.group.coordinator import GroupCoordinator

__all__ = ["GroupConfig", "GroupCoordinator"]
