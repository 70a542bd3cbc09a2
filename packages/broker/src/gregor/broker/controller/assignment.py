"""Replica assignment for new topics and partitions: Kafka's rack-aware round robin.

The same inputs (brokers, racks, partition count, replication factor, start index) give the
same assignment as Kafka's `AdminUtils.assignReplicasToBrokers`, so tools and expectations
carry over:

- the first replica of each partition goes round robin over the brokers, from `start_index`;
- the other replicas follow at a shift that grows by one each time the partitions wrap
  around the broker list, so a broker's followers are spread over the other brokers;
- when every broker has a rack, the broker list is first interleaved by rack, and followers
  skip brokers whose rack (or the broker itself) already holds a replica of the partition,
  until every rack (or broker) has one.

Without a fixed start, Kafka picks the start index and the initial shift at random (to spread
leadership across topics); so do we.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

import attrs

from gregor.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
)


@attrs.frozen
class BrokerRack:
    id: int
    rack: str | None = None


class AssignmentError(ValueError):
    """Racks are given for some brokers only, so a rack-aware assignment is impossible."""


def assign_replicas(
    brokers: Sequence[BrokerRack],
    partitions: int,
    replication_factor: int,
    start_index: int = -1,
    start_partition: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Map each new partition id to its replicas, the preferred leader first.

    `start_partition` is the id of the first partition to assign (for partitions added to an
    existing topic); `start_index` fixes both the first broker and the initial shift.
    """
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    rng = rng or random.Random()
    if all(b.rack is None for b in brokers):
        pick = _rack_unaware([b.id for b in brokers], replication_factor)
    elif any(b.rack is None for b in brokers):
        raise AssignmentError(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    else:
        racks = {b.id: str(b.rack) for b in brokers}
        pick = _rack_aware(racks, replication_factor)
    return _round_robin(len(brokers), partitions, start_index, start_partition, rng, pick)


def _replica_index(first: int, shift: int, replica: int, brokers: int) -> int:
    step = 1 + (shift + replica) % (brokers - 1)
    return (first + step) % brokers


def _starts(start_index: int, count: int, rng: random.Random) -> tuple[int, int]:
    """The first broker's index and the initial follower shift."""
    if start_index >= 0:
        return start_index, start_index
    # Kafka draws the two independently.
    return rng.randrange(count), rng.randrange(count)


# Picks a partition's replicas: (index of its first replica, current shift) -> broker ids.
_Picker = Callable[[int, int], list[int]]


def _round_robin(
    brokers: int,
    partitions: int,
    start_index: int,
    start_partition: int,
    rng: random.Random,
    pick: _Picker,
) -> dict[int, list[int]]:
    """The loop both variants share: leaders round robin from the start index, the shift
    growing by one each time the partition ids wrap around the broker list."""
    start, shift = _starts(start_index, brokers, rng)
    result: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(partitions):
        if partition > 0 and partition % brokers == 0:
            shift += 1
        result[partition] = pick((partition + start) % brokers, shift)
        partition += 1
    return result


def _rack_unaware(broker_ids: list[int], replication_factor: int) -> _Picker:
    n = len(broker_ids)

    def pick(first: int, shift: int) -> list[int]:
        followers = [_replica_index(first, shift, j, n) for j in range(replication_factor - 1)]
        return [broker_ids[first]] + [broker_ids[i] for i in followers]

    return pick


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers interleaved by rack: racks in name order, brokers by id within a rack."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(racks):
        result += [queue[depth] for queue in queues if depth < len(queue)]
        depth += 1
    return result


def _rack_aware(racks: Mapping[int, str], replication_factor: int) -> _Picker:
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    rack_count = len(set(racks.values()))

    def pick(first: int, shift: int) -> list[int]:
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * rack_count, k, n)]
                rack = racks[broker]
                k += 1
                # Skip a broker whose rack already has a replica while some rack has none,
                # or that holds one itself while some broker holds none.
                rack_ok = rack not in racks_used or len(racks_used) == rack_count
                broker_ok = broker not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        return replicas

    return pick
