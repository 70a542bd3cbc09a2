"""Fetch from the closest replica (KIP-392): the replica a consumer should read from.

`replica.selector.class` names the selector, by Kafka's class names: none (the default) or
LeaderSelector keep every consumer on the leader; RackAwareReplicaSelector picks, for a
consumer whose Fetch (v11+) names its rack, the leader if it is in that rack, else the most
caught-up in-sync replica there. The leader then answers that consumer's partition with the
replica's id as `preferred_read_replica` and no records, and the consumer fetches from it.

The candidates are Kafka's (ReplicaManager.findPreferredReadReplica): the leader, and the
followers in the ISR whose log holds the fetch offset (log start <= offset <= log end) and
that are alive with an endpoint on the consumer's listener.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import attrs

from gregor.broker.config import REPLICA_SELECTOR_CLASSES
from gregor.broker.metadata_cache import Node
from gregor.broker.partition import Partition

RACK_AWARE_SELECTOR, LEADER_SELECTOR = REPLICA_SELECTOR_CLASSES


@attrs.frozen(slots=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


# (client rack, leader, candidates including the leader) -> the replica to read from
Selector = Callable[[str, ReplicaView, Sequence[ReplicaView]], ReplicaView]


def leader_selector(rack: str, leader: ReplicaView, replicas: Sequence[ReplicaView]) -> ReplicaView:
    return leader


def rack_aware_selector(
    rack: str, leader: ReplicaView, replicas: Sequence[ReplicaView]
) -> ReplicaView:
    if not rack:
        return leader
    same_rack = [r for r in replicas if r.rack == rack]
    if not same_rack or leader in same_rack:
        return leader
    # The most caught up: the highest log end, then the most recently caught up.
    return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))


SELECTORS: Final[dict[str, Selector]] = {
    RACK_AWARE_SELECTOR: rack_aware_selector,
    LEADER_SELECTOR: leader_selector,
}


def preferred_read_replica(
    selector: Selector,
    partition: Partition,
    client_rack: str,
    fetch_offset: int,
    node: Callable[[int], Node | None],
    now: int,
) -> int | None:
    """The follower a consumer should read `partition` from (led here), None for the
    leader. `node` gives a live broker's endpoint on the consumer's listener."""
    local = partition.log
    if local is None or not partition.is_leader:
        return None
    leader_node = node(partition.local_id)
    leader = ReplicaView(
        partition.local_id, leader_node.rack if leader_node else None, local.log_end_offset, 0
    )
    candidates = [leader]
    for follower in partition.followers.values():
        found = node(follower.broker_id)
        if (
            found is not None
            and follower.broker_id in partition.isr
            and follower.log_start_offset <= fetch_offset <= follower.log_end_offset
        ):
            since = now - follower.last_caught_up_time_ms
            candidates.append(
                ReplicaView(follower.broker_id, found.rack, follower.log_end_offset, since)
            )
    # Sorted by id, so that equal replicas give the same answer every time.
    chosen = selector(client_rack, leader, sorted(candidates, key=lambda r: r.broker_id))
    return None if chosen is leader else chosen.broker_id
