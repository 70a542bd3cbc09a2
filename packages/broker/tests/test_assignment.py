"""Replica assignment gives Kafka's results for Kafka's documented inputs, and keeps its
promises (distinct replicas, racks covered, leaders spread) for any input."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.broker.controller.assignment import (
    AssignmentError,
    BrokerRack,
    assign_replicas,
    rack_alternated_brokers,
)
from gregor.protocol.errors import InvalidPartitionsError, InvalidReplicationFactorError

RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def brokers(racks: dict[int, str | None]) -> list[BrokerRack]:
    return [BrokerRack(i, racks[i]) for i in sorted(racks)]


def test_rack_alternated_list() -> None:
    assert rack_alternated_brokers(RACKS) == [0, 3, 1, 5, 4, 2]
    without_5 = {k: v for k, v in RACKS.items() if k != 5}
    assert rack_alternated_brokers(without_5) == [0, 3, 1, 4, 2]


def test_rack_aware_assignment_of_kafkas_example() -> None:
    assert assign_replicas(brokers(dict(RACKS)), 7, 3, start_index=0, start_partition=0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],  # the second round shifts the followers
    }


def test_rack_unaware_assignment_of_kafkas_example() -> None:
    plain = [BrokerRack(i) for i in range(5)]
    assert assign_replicas(plain, 10, 3, start_index=0) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_added_partitions_continue_the_round_robin() -> None:
    # As Kafka adds partitions: the leaders continue round robin from the new partition ids;
    # the follower shift starts afresh and grows at the next wrap-around.
    plain = [BrokerRack(i) for i in range(5)]
    assert assign_replicas(plain, 5, 3, start_index=0, start_partition=6) == {
        6: [1, 2, 3],
        7: [2, 3, 4],
        8: [3, 4, 0],
        9: [4, 0, 1],
        10: [0, 2, 3],
    }


def test_invalid_requests_raise_kafkas_errors() -> None:
    plain = [BrokerRack(i) for i in range(3)]
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(plain, 0, 1)
    with pytest.raises(InvalidReplicationFactorError, match="larger than 0"):
        assign_replicas(plain, 1, 0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 3"):
        assign_replicas(plain, 1, 4)
    with pytest.raises(AssignmentError, match="Not all brokers have rack"):
        assign_replicas([BrokerRack(0, "a"), BrokerRack(1)], 1, 1)


def test_random_start_is_seedable_and_varies() -> None:
    plain = [BrokerRack(i) for i in range(4)]
    first = assign_replicas(plain, 4, 2, rng=random.Random(7))
    assert first == assign_replicas(plain, 4, 2, rng=random.Random(7))
    leaders = {assign_replicas(plain, 1, 1, rng=random.Random(s))[0][0] for s in range(40)}
    assert leaders == {0, 1, 2, 3}


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 9).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.sampled_from("abc"), min_size=n, max_size=n) | st.just([None] * n),
            st.integers(1, n),
            st.integers(1, 30),
            st.integers(-1, n - 1),
        )
    )
)
def test_assignment_invariants(case: tuple[int, list[str | None], int, int, int]) -> None:
    n, racks, rf, partitions, start = case
    cluster = [BrokerRack(i * 10, rack) for i, rack in enumerate(racks)]
    result = assign_replicas(cluster, partitions, rf, start_index=start, rng=random.Random(1))
    assert sorted(result) == list(range(partitions))
    rack_of = {b.id: b.rack for b in cluster}
    rack_count = len(set(racks))
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf  # no broker twice
        assert set(replicas) <= set(rack_of)
        if racks[0] is not None:
            # Every rack gets a replica before any rack gets a second one.
            assert len({rack_of[r] for r in replicas}) == min(rf, rack_count)
    if racks[0] is None and partitions % n == 0:
        # Leaders (and all replicas) are spread evenly.
        leaders = Counter(r[0] for r in result.values())
        assert set(leaders.values()) == {partitions // n}
        everything = Counter(b for r in result.values() for b in r)
        assert set(everything.values()) == {partitions * rf // n}
