"""KIP-392's replica selection: Kafka's RackAwareReplicaSelector and its candidates."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from gregor.broker.metadata_cache import Node
from gregor.broker.partition import FollowerState, Partition
from gregor.broker.replica_selector import (
    LEADER_SELECTOR,
    SELECTORS,
    ReplicaView,
    preferred_read_replica,
    rack_aware_selector,
)

RACKS = {0: "a", 1: "b", 2: "c", 3: "b"}
NOW = 1_000_000


def view(broker_id: int, leo: int = 10, since: int = 0) -> ReplicaView:
    return ReplicaView(broker_id, RACKS[broker_id], leo, since)


def test_rack_aware_picks_the_leader_unless_another_rack_matches() -> None:
    leader = view(0)
    replicas = [leader, view(1), view(2)]
    assert rack_aware_selector("", leader, replicas) is leader
    assert rack_aware_selector("z", leader, replicas) is leader
    assert rack_aware_selector("a", leader, replicas) is leader
    assert rack_aware_selector("b", leader, replicas) == view(1)


def test_rack_aware_picks_the_most_caught_up_in_the_rack() -> None:
    leader = view(0)
    behind, ahead = view(1, leo=8), view(3, leo=10)
    assert rack_aware_selector("b", leader, [leader, behind, ahead]) == ahead
    stale, fresh = view(1, since=500), view(3, since=20)
    assert rack_aware_selector("b", leader, [leader, stale, fresh]) == fresh


class Host:
    broker_id = 0


def partition(isr: set[int], followers: dict[int, tuple[int, int]]) -> Partition:
    """Led by broker 0 with a log ending at 10; followers: id -> (log start, log end)."""
    p = Partition(cast(Any, Host()), "t", 0)
    p.log = cast(Any, SimpleNamespace(log_end_offset=10))
    p.leader_id = 0
    p.isr = frozenset(isr)
    for broker_id, (start, end) in followers.items():
        p.followers[broker_id] = FollowerState(
            broker_id, log_end_offset=end, log_start_offset=start, last_caught_up_time_ms=NOW
        )
    return p


def nodes(alive: set[int]) -> Any:
    return lambda i: Node(i, "127.0.0.1", 9092 + i, RACKS[i]) if i in alive else None


def test_the_candidates_are_live_in_sync_replicas_holding_the_offset() -> None:
    rack_aware = SELECTORS["org.apache.kafka.common.replica.RackAwareReplicaSelector"]
    p = partition({0, 1, 2}, {1: (0, 10), 2: (0, 10)})
    assert preferred_read_replica(rack_aware, p, "b", 5, nodes({0, 1, 2}), NOW) == 1
    assert preferred_read_replica(rack_aware, p, "a", 5, nodes({0, 1, 2}), NOW) is None
    assert preferred_read_replica(rack_aware, p, "", 5, nodes({0, 1, 2}), NOW) is None
    # Dead, or without an endpoint on the consumer's listener.
    assert preferred_read_replica(rack_aware, p, "b", 5, nodes({0, 2}), NOW) is None
    # Out of the ISR.
    p = partition({0, 2}, {1: (0, 10), 2: (0, 10)})
    assert preferred_read_replica(rack_aware, p, "b", 5, nodes({0, 1, 2}), NOW) is None
    # Its log does not hold the fetch offset (yet, or any more).
    p = partition({0, 1, 2}, {1: (3, 7), 2: (0, 10)})
    for offset in (2, 8):
        assert preferred_read_replica(rack_aware, p, "b", offset, nodes({0, 1, 2}), NOW) is None
    assert preferred_read_replica(rack_aware, p, "b", 7, nodes({0, 1, 2}), NOW) == 1
    # A follower asks nothing of a follower: only a leader names a replica.
    p.leader_id = 2
    assert preferred_read_replica(rack_aware, p, "b", 5, nodes({0, 1, 2}), NOW) is None


def test_leader_selector_keeps_consumers_on_the_leader() -> None:
    p = partition({0, 1, 2}, {1: (0, 10), 2: (0, 10)})
    assert preferred_read_replica(SELECTORS[LEADER_SELECTOR], p, "b", 5, nodes({0, 1}), NOW) is None
