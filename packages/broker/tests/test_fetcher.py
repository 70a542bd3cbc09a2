"""The replica fetcher's loop, alone: a partition that moved on under it rests its state for a
backoff. Sending nothing for it, the loop used to go round without ever yielding, and so
starved the whole broker: a LeaderAndIsr that a full disk broke off half-way left such a
state behind, and the broker spun at 100% CPU, deaf even to SIGTERM."""

from __future__ import annotations

import types

import pytest
import trio
from trio.testing import MockClock

from gregor.broker.config import BrokerConfig
from gregor.broker.fetcher import PartitionFetchState, ReplicaFetcher, State
from gregor.broker.replication_quotas import ReplicationQuotas
from gregor.client.security import ClientSecurity


class Host:
    """The broker as a fetcher sees it, hosting one partition."""

    def __init__(self, partition: object) -> None:
        self.config = BrokerConfig.from_properties(
            {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}
        )
        self.broker_id = 1
        self.replication_quotas = ReplicationQuotas(1)
        self.inter_broker_security = ClientSecurity()
        self.hosted = partition

    def leader_endpoint(self, leader_id: int) -> tuple[str, int] | None:
        return None

    def partition(self, topic: str, index: int) -> object:
        return self.hosted


MOVED_ON = {
    "led here now": types.SimpleNamespace(log=object(), is_leader=True, leader_epoch=5),
    "in a later epoch": types.SimpleNamespace(log=object(), is_leader=False, leader_epoch=5),
    "gone": None,
}


@pytest.mark.timeout(30)  # the old loop never yields: it would hang here
@pytest.mark.parametrize("phase", [State.TRUNCATING, State.FETCHING])
@pytest.mark.parametrize("moved_on", MOVED_ON.keys())
async def test_a_partition_that_moved_on_rests_the_loop(
    phase: State, moved_on: str, autojump_clock: MockClock
) -> None:
    fetcher = ReplicaFetcher(Host(MOVED_ON[moved_on]), 2, 0)  # type: ignore[arg-type]
    held = PartitionFetchState(fetch_offset=0, leader_epoch=4, state=phase)
    fetcher.add(("t", 0), held)
    with trio.move_on_after(10):
        # Nothing may be sent for it: the connection is never touched.
        await fetcher._replicate(None)  # type: ignore[arg-type]
    # It rested a backoff at a time (replica.fetch.backoff.ms), still held for the broker
    # to replace or remove.
    assert fetcher.backoff == 1.0
    assert 10 <= held.delayed_until <= 11
    assert fetcher.states == {("t", 0): held}
