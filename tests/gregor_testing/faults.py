"""The nemesis (`nemesis.py`) on a local cluster, striking the broker that plays a role now
(a transaction coordinator, a partition's leader, the controller): it SIGKILLs it, waits
until the cluster has moved the role to another broker, restarts it, and waits until every
partition is fully replicated again before the next fault.

The roles are functions the test gives (`Role`: which broker plays it now); the finders
here answer as a client would learn it: FindCoordinator, Metadata, `/controller` in
ZooKeeper.
"""

from __future__ import annotations

from collections.abc import Mapping

from gregor.broker.zk import znodes
from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.apis.find_coordinator import FindCoordinatorRequest
from gregor.protocol.errors import ErrorCode
from gregor_testing import nemesis
from gregor_testing.cluster import WireClient, partitions_of, wait_for
from gregor_testing.nemesis import Role
from gregor_testing.processes import zookeeper_client

TRANSACTION_KEY = 1
GROUP_KEY = 0


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


class Nemesis(nemesis.Nemesis):
    """SIGKILLs the broker playing each role in turn (`roles` in the order given, round
    robin, `strike`), and brings it back; `faults` is the history."""

    def __init__(
        self, cluster: LocalCluster, roles: Mapping[str, Role], timeout: float = 120.0
    ) -> None:
        super().__init__(nemesis.Hosts.of_cluster(cluster), roles, timeout)
        self.cluster = cluster
