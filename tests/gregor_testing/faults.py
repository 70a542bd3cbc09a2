"""A nemesis for Jepsen-style tests: it finds the broker that plays a role now (a
transaction coordinator, a partition's leader, the controller), SIGKILLs it, waits until
the cluster has moved the role to another broker, restarts it, and waits until every
partition is fully replicated again before the next fault.

The roles are functions the test gives (`Role`: which broker plays it now); the finders
here answer as a client would learn it: FindCoordinator, Metadata, `/controller` in
ZooKeeper.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

import attrs

from gregor.broker.zk import znodes
from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.apis.find_coordinator import FindCoordinatorRequest
from gregor.protocol.errors import ErrorCode
from gregor_testing.cluster import (
    WireClient,
    metadata,
    partitions_of,
    wait_for,
    wait_unregistered,
)
from gregor_testing.processes import zookeeper_client

log = logging.getLogger(__name__)

TRANSACTION_KEY = 1
GROUP_KEY = 0

Role = Callable[[], int]


def live_brokers(cluster: LocalCluster) -> list[BrokerProcess]:
    return [b for b in cluster.brokers if b.is_running()]


def controller_id(cluster: LocalCluster) -> int:
    """The controller as `/controller` in ZooKeeper names it (-1 while there is none)."""
    with zookeeper_client(cluster.zookeeper_connect) as client:
        if client.exists(znodes.CONTROLLER) is None:
            return -1
        data, _ = client.get(znodes.CONTROLLER)
    return znodes.decode_controller(data)


def find_coordinator(
    cluster: LocalCluster, key: str, key_type: int, timeout: float = 60.0
) -> BrokerProcess:
    """The coordinator of a transactional id (key_type 1) or a group (0), as FindCoordinator
    answers it: asked of each live broker until one names a live broker."""
    found: list[int] = []

    def ask() -> bool:
        for broker in live_brokers(cluster):
            try:
                with WireClient(broker) as conn:
                    response = conn.request(FindCoordinatorRequest(key=key, key_type=key_type), 2)
            except OSError:
                continue
            # A killed broker is named until the controller moves its partitions.
            if (
                response.error_code == ErrorCode.NONE
                and cluster.broker(response.node_id).is_running()
            ):
                found.append(response.node_id)
                return True
        return False

    wait_for(ask, timeout, f"the coordinator of {key}")
    return cluster.broker(found[-1])


def partition_leader(cluster: LocalCluster, topic: str, partition: int) -> int:
    """The partition's leader as a live broker's Metadata answers (-1: none)."""
    seen = partitions_of(cluster, topic, live_brokers(cluster)[0].broker_id)
    return seen[partition].leader_id if partition in seen else -1


def moved_away(cluster: LocalCluster, broker_id: int) -> bool:
    """A live broker's Metadata shows `broker_id` leading nothing, every partition led, and
    a controller that is another broker."""
    try:
        seen = metadata(cluster, None, live_brokers(cluster)[0].broker_id)
    except OSError:
        return False
    if seen.controller_id in (broker_id, -1):
        return False
    return all(
        p.leader_id not in (broker_id, -1) for topic in seen.topics for p in topic.partitions
    )


def fully_replicated(cluster: LocalCluster) -> bool:
    """Every live broker answers, and shows every partition led and its ISR complete."""
    for broker in live_brokers(cluster):
        try:
            seen = metadata(cluster, None, broker.broker_id)
        except OSError:
            return False
        for topic in seen.topics:
            if topic.error_code != ErrorCode.NONE:
                return False
            for p in topic.partitions:
                if p.leader_id < 0 or sorted(p.isr_nodes) != sorted(p.replica_nodes):
                    return False
    return True


@attrs.frozen
class Fault:
    role: str
    broker_id: int
    seconds: float  # from the kill until the cluster was whole again


class Nemesis:
    """SIGKILLs the broker playing each role in turn (`roles` in the order given, round
    robin), and brings it back; `faults` is the history."""

    def __init__(
        self, cluster: LocalCluster, roles: Mapping[str, Role], timeout: float = 120.0
    ) -> None:
        self.cluster = cluster
        self.roles = dict(roles)
        self.timeout = timeout
        self.faults: list[Fault] = []

    def next_role(self) -> str:
        names = list(self.roles)
        return names[len(self.faults) % len(names)]

    def strike(self, role: str | None = None) -> Fault:
        role = role or self.next_role()
        broker_id = self.roles[role]()
        victim = self.cluster.broker(broker_id)
        started = time.monotonic()
        log.info("nemesis: SIGKILL broker %d (%s)", broker_id, role)
        victim.kill()
        wait_unregistered(self.cluster, broker_id, self.timeout)
        wait_for(
            lambda: moved_away(self.cluster, broker_id),
            self.timeout,
            f"broker {broker_id}'s roles ({role} among them) to move",
        )
        victim.start()
        wait_for(lambda: fully_replicated(self.cluster), self.timeout, "every ISR complete")
        fault = Fault(role, broker_id, time.monotonic() - started)
        self.faults.append(fault)
        log.info("nemesis: broker %d back (%s, %.1f s)", broker_id, role, fault.seconds)
        return fault
