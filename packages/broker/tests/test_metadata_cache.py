"""The metadata cache as UpdateMetadata fills it and Metadata reads it."""

from __future__ import annotations

import uuid

import trio
import trio.testing

from gregor.broker.metadata_cache import MetadataCache
from gregor.protocol.apis.update_metadata import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from gregor.protocol.errors import ErrorCode

TOPIC_ID = uuid.uuid4()


def broker(broker_id: int, listeners: tuple[str, ...] = ("PLAINTEXT",)) -> UpdateMetadataBroker:
    return UpdateMetadataBroker(
        broker_id,
        endpoints=[
            UpdateMetadataEndpoint(9092 + broker_id, f"b{broker_id}", name, 0) for name in listeners
        ],
        rack=f"rack-{broker_id}",
    )


def state(
    partition: int, leader: int, isr: list[int], replicas: list[int]
) -> UpdateMetadataPartitionState:
    return UpdateMetadataPartitionState(
        "orders", partition, 3, leader, 5, isr, 7, replicas, offline_replicas=[]
    )


def update(
    brokers: list[UpdateMetadataBroker], *states: UpdateMetadataPartitionState
) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=3,
        topic_states=[UpdateMetadataTopicState("orders", TOPIC_ID, list(states))] if states else [],
        live_brokers=brokers,
    )


def test_partitions_brokers_and_topic_ids() -> None:
    cache = MetadataCache(0)
    cache.update(
        update([broker(0), broker(1)], state(0, 0, [0, 1], [0, 1]), state(1, 1, [1], [1, 0]))
    )
    assert cache.controller_id == 1
    assert cache.topics() == ["orders"]
    assert cache.topic_id("orders") == TOPIC_ID
    assert cache.topic_name(TOPIC_ID) == "orders"
    assert [(b.node_id, b.host, b.port, b.rack) for b in cache.brokers_metadata("PLAINTEXT")] == [
        (0, "b0", 9092, "rack-0"),
        (1, "b1", 9093, "rack-1"),
    ]
    partitions = cache.partitions_metadata("orders", "PLAINTEXT")
    assert partitions is not None
    assert [
        (p.partition_index, p.leader_id, p.leader_epoch, p.isr_nodes, p.replica_nodes, p.error_code)
        for p in partitions
    ] == [
        (0, 0, 5, [0, 1], [0, 1], ErrorCode.NONE),
        (1, 1, 5, [1], [1, 0], ErrorCode.NONE),
    ]
    assert cache.partitions_metadata("unknown", "PLAINTEXT") is None


def test_a_dead_leader_is_leader_not_available() -> None:
    cache = MetadataCache(0)
    cache.update(update([broker(0)], state(0, 1, [1], [1, 0])))
    (partition,) = cache.partitions_metadata("orders", "PLAINTEXT") or []
    assert (partition.leader_id, partition.error_code) == (-1, ErrorCode.LEADER_NOT_AVAILABLE)


def test_a_leader_without_the_listener() -> None:
    cache = MetadataCache(0)
    cache.update(update([broker(0), broker(1, ("INTERNAL",))], state(0, 1, [1, 0], [1, 0])))
    (v6,) = cache.partitions_metadata("orders", "PLAINTEXT", error_unavailable_listeners=True) or []
    assert v6.error_code == ErrorCode.LISTENER_NOT_FOUND
    (v5,) = cache.partitions_metadata("orders", "PLAINTEXT") or []
    assert v5.error_code == ErrorCode.LEADER_NOT_AVAILABLE
    (v0,) = cache.partitions_metadata("orders", "INTERNAL", error_unavailable_endpoints=True) or []
    assert (v0.leader_id, v0.replica_nodes, v0.error_code) == (
        1,
        [1],
        ErrorCode.REPLICA_NOT_AVAILABLE,
    )


def test_updates_replace_partitions_and_deletion_removes_them() -> None:
    cache = MetadataCache(0)
    cache.update(update([broker(0)], state(0, 0, [0], [0]), state(1, 0, [0], [0])))
    cache.update(update([broker(0), broker(1)], state(1, 1, [1, 0], [0, 1])))
    assert cache.partition("orders", 0) is not None  # untouched by an update not naming it
    found = cache.partition("orders", 1)
    assert found is not None and (found.leader, found.isr) == (1, (1, 0))
    assert cache.alive_broker_ids() == [0, 1]
    deleted = cache.update(update([broker(0)], state(0, -2, [], [0]), state(1, -2, [], [0])))
    assert deleted == [("orders", 0), ("orders", 1)]
    assert not cache.contains_topic("orders")
    assert cache.topic_name(TOPIC_ID) is None


async def test_a_waiter_wakes_on_the_update_that_satisfies_it(
    mock_clock: trio.testing.MockClock,
) -> None:
    # The clock stands still: only an update can wake the waiter, never a timer.
    cache = MetadataCache(0)
    results: list[bool] = []

    def led_by_1() -> bool:
        found = cache.partition("orders", 0)
        return found is not None and found.leader == 1

    async def wait() -> None:
        results.append(await cache.wait_until(led_by_1, 30_000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        cache.update(update([broker(0)], state(0, 0, [0], [0, 1])))  # not yet
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        cache.update(update([broker(0), broker(1)], state(0, 1, [1, 0], [0, 1])))
        await trio.testing.wait_all_tasks_blocked()
        assert results == [True]
    assert trio.current_time() == 0


async def test_a_waiter_gives_up_after_its_timeout(autojump_clock: trio.abc.Clock) -> None:
    cache = MetadataCache(0)
    cache.update(update([broker(0)], state(0, 0, [0], [0])))
    assert await cache.wait_until(lambda: cache.contains_topic("orders"), 0)
    assert not await cache.wait_until(lambda: not cache.contains_topic("orders"), 5_000)
    assert trio.current_time() == 5.0
