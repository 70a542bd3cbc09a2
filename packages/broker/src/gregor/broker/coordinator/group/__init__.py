"""The group coordinator: consumer groups (the classic rebalance protocol) and their
committed offsets, kept in `__consumer_offsets`.

- `membership`: `GroupCoordinator`, the membership requests (JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup) with Kafka's errors; it owns the parts below;
- `manager`: the one owner of the state: the groups this broker coordinates, loading and
  unloading partitions, writes, offset expiry, and the checks every request passes;
- `rebalance`, `commits`, `admin`: the rules of joins, offsets and the admin APIs, each
  working on the manager's state;
- `group`, `member`, `state`: a group's bookkeeping and its state machine;
- `consumer_group`, `consumer_heartbeats`, `server_assignors`: KIP-848 consumer groups
  (ConsumerGroupHeartbeat/Describe), beside the classic ones in the same groups;
- `records`, `consumer_records`: the group state as `__consumer_offsets` records and back.

It reaches `__consumer_offsets` through a `coordinator.topic_log.TopicLog` and learns which
partitions this broker leads from `GroupCoordinator.on_leadership_change`; the broker's
wiring connects both.
"""

from gregor.broker.coordinator.group.config import GroupConfig
from gregor.broker.coordinator.group.membership import GroupCoordinator

__all__ = ["GroupConfig", "GroupCoordinator"]
