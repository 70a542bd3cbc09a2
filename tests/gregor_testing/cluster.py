"""pytest fixtures for real gregor-broker clusters, and what tests do with them.

Clusters run on the session's ZooKeeper, each in a chroot of its own, with brokers started as
`gregor-broker` processes by the launcher (`gregor.devcluster`, infra/devcluster). Every
process a fixture starts is stopped by it, also when the test fails; a failed test shows the
tail of each broker's log.

- `cluster_factory(brokers=3, racks=None, **properties)`: clusters for this test alone
  (tests that kill, pause or restart brokers; `racks`: each broker's broker.rack);
- `cluster`: three brokers for this test;
- `shared_cluster`: three brokers shared by a test module (tests use topics of their own);
- `cluster_fixture(name, scope, properties)`: such a fixture for another scope or other
  properties (`tests/groups` shares one per package), on `start_cluster` and `stop_cluster`.

Topics are created as a ZooKeeper-mode admin tool creates them (`create_topic`): the topic's
znode with its replica assignment; the controller then elects leaders and tells the brokers.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from gregor.broker.zk import ReplicaAssignment, znodes
from gregor.devcluster import BrokerProcess, LocalCluster, ZooKeeper, send_request, wait_until
from gregor.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from gregor.protocol.apis.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponsePartition,
)
from gregor.protocol.framing import decode_response, encode_request
from gregor.protocol.schema import Request
from gregor_testing.processes import zookeeper_client

_clusters = itertools.count()
METADATA_VERSION = 9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


def _failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "report_call", None)
    return report is None or report.failed


def start_cluster(
    directory: Path,
    zookeeper: ZooKeeper,
    brokers: int,
    properties: Mapping[str, str],
    listeners: Mapping[str, str] | None = None,
    racks: Sequence[str] | None = None,
) -> LocalCluster:
    """Start `brokers` gregor-broker processes (ids 0..brokers-1) under `directory`, on
    `zookeeper` in a chroot of their own, with these server properties, extra `listeners`
    (name -> security protocol) and `racks` (broker i's broker.rack); return once every
    broker answers. Stop it with `stop_cluster`."""
    chroot = f"/gregor-{next(_clusters)}-{uuid.uuid4().hex[:8]}"
    cluster = LocalCluster(
        directory,
        brokers,
        zookeeper_connect=zookeeper.connect + chroot,
        properties=properties,
        listeners=listeners,
        racks=racks,
    )
    cluster.start()
    return cluster


def stop_cluster(cluster: LocalCluster, show_logs: bool) -> None:
    """Stop every broker of the cluster (SIGTERM: a controlled shutdown); with `show_logs`
    (a test failed), print the tail of each broker's log for the test report."""
    cluster.stop()
    if show_logs:
        for broker in cluster.brokers:
            print(f"----- broker {broker.broker_id} ({broker.log_path}) -----")
            print(broker.log_tail(6000))


def cluster_fixture(
    name: str,
    scope: Literal["module", "package"],
    properties: Mapping[str, str],
    *,
    own_zookeeper: bool = False,
) -> Any:
    """A fixture called `name`, wider than one test: three brokers with these server
    properties, started on first use and stopped at the end of the scope, with their logs
    shown if any test of the session failed. Assign it to a module-level name in a conftest
    (or a test module) for pytest to find it. With `own_zookeeper` the cluster has a
    ZooKeeper server of its own (a datacenter's), not a chroot of the session's."""

    @pytest.fixture(scope=scope, name=name)
    def fixture(
        request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory,
        zookeeper: ZooKeeper,
    ) -> Iterator[LocalCluster]:
        server = ZooKeeper(tmp_path_factory.mktemp(f"{name}-zookeeper")) if own_zookeeper else None
        if server is not None:
            server.start()
        try:
            cluster = start_cluster(
                tmp_path_factory.mktemp(name), server or zookeeper, 3, properties
            )
            yield cluster
            stop_cluster(cluster, request.session.testsfailed > 0)
        finally:
            if server is not None:
                server.stop()

    return fixture


@pytest.fixture
def cluster_factory(
    request: pytest.FixtureRequest, tmp_path: Path, zookeeper: ZooKeeper
) -> Iterator[Callable[..., LocalCluster]]:
    started: list[LocalCluster] = []

    def make(
        brokers: int = 3,
        *,
        listeners: Mapping[str, str] | None = None,
        racks: Sequence[str] | None = None,
        **properties: Any,
    ) -> LocalCluster:
        props = {
            key if "." in key else key.replace("_", "."): str(value)
            for key, value in properties.items()
        }
        cluster = start_cluster(
            tmp_path / f"cluster-{len(started)}", zookeeper, brokers, props, listeners, racks
        )
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        stop_cluster(cluster, _failed(request))


@pytest.fixture
def cluster(cluster_factory: Callable[..., LocalCluster]) -> LocalCluster:
    return cluster_factory(3)


shared_cluster = cluster_fixture("shared_cluster", "module", {})


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def metadata(
    cluster: LocalCluster,
    topics: Sequence[str] | None,
    broker_id: int = 0,
    version: int = METADATA_VERSION,
) -> MetadataResponse:
    broker = cluster.broker(broker_id)
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
    )
    response = send_request(broker.host, broker.port, request, version)
    assert isinstance(response, MetadataResponse)
    return response


def partitions_of(
    cluster: LocalCluster, topic: str, broker_id: int = 0
) -> dict[int, MetadataResponsePartition]:
    """The topic's partitions as a broker's Metadata answer shows them ({} if unknown)."""
    response = metadata(cluster, [topic], broker_id)
    found = [t for t in response.topics if t.name == topic and t.error_code == 0]
    return {p.partition_index: p for p in found[0].partitions} if found else {}


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `predicate()` every 0.1 s until it holds; TimeoutError naming `what` otherwise."""
    wait_until(predicate, timeout, what, interval=0.1)


def log_mark(broker: BrokerProcess) -> int:
    """Where the broker's log ends now: `wait_for_log` reads only what comes after it."""
    try:
        return broker.log_path.stat().st_size
    except FileNotFoundError:
        return 0


def wait_for_log(broker: BrokerProcess, text: str, since: int, timeout: float = 30.0) -> str:
    """Until `text` appears in the broker's log after `since` (a `log_mark`); the log from
    there."""
    found: list[str] = []

    def appeared() -> bool:
        with broker.log_path.open("rb") as log:
            log.seek(since)
            found[:] = [log.read().decode(errors="replace")]
        return text in found[0]

    wait_for(appeared, timeout, f"{text!r} in broker {broker.broker_id}'s log")
    return found[0]


def wait_for_topic(
    cluster: LocalCluster, topic: str, partitions: int, timeout: float = 30.0, full_isr: bool = True
) -> None:
    """Until every live broker reports every partition led (and, by default, fully in sync)."""

    def ready() -> bool:
        for broker in cluster.brokers:
            if not broker.is_running():
                continue
            try:
                seen = partitions_of(cluster, topic, broker.broker_id)
            except OSError:
                return False
            if len(seen) != partitions:
                return False
            for p in seen.values():
                if p.error_code != 0 or p.leader_id < 0:
                    return False
                if full_isr and sorted(p.isr_nodes) != sorted(p.replica_nodes):
                    return False
        return True

    wait_for(ready, timeout, f"topic {topic} with {partitions} partitions to be ready")


def create_topic(
    cluster: LocalCluster,
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    *,
    assignment: Mapping[int, Sequence[int]] | None = None,
    configs: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    wait: bool = True,
) -> dict[int, list[int]]:
    """Create a topic through ZooKeeper (as `kafka-topics.sh --zookeeper` did) and wait until
    every broker has it (unless not `wait`: then the brokers hear of it in their own time).
    Replicas go round robin from broker 0 unless `assignment` says."""
    count = len(cluster.brokers)
    chosen = {
        p: list(assignment[p])
        if assignment
        else [(p + r) % count for r in range(replication_factor)]
        for p in (assignment or range(partitions))
    }
    with zookeeper_client(cluster.zookeeper_connect) as client:
        if configs:
            path = znodes.config_entity_path(znodes.CONFIG_TOPICS, name)
            client.create(path, znodes.encode_entity_config(dict(configs)), makepath=True)
        client.create(
            znodes.topic_path(name),
            znodes.encode_topic(
                znodes.new_topic_id(), {p: ReplicaAssignment(tuple(r)) for p, r in chosen.items()}
            ),
            makepath=True,
        )
    if wait:
        wait_for_topic(cluster, name, len(chosen), timeout)
    return chosen


def entity_config(cluster: LocalCluster, entity_type: str, name: str) -> dict[str, str]:
    """An entity's dynamic config as ZooKeeper holds it (`znodes.CONFIG_TOPICS` etc.)."""
    path = znodes.config_entity_path(entity_type, name)
    with zookeeper_client(cluster.zookeeper_connect) as zk:
        data, _ = zk.get(path)
    return znodes.decode_entity_config(path, data)


class WireClient:
    """A socket to one broker's listener (PLAINTEXT unless told; TLS with `ssl_context`),
    speaking the protocol one request at a time (or not at all: tests send what they like
    through `sock`)."""

    def __init__(
        self,
        broker: BrokerProcess,
        timeout: float = 30.0,
        *,
        listener: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        sock = socket.create_connection((broker.host, broker.ports[listener]), timeout=timeout)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=broker.host)
        self.sock = sock
        self.correlation = 0

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, body: Request, version: int) -> None:
        """Send a request without reading an answer (Produce with acks=0)."""
        self.correlation += 1
        self.sock.sendall(encode_request(body, version, self.correlation, "wire-test"))

    def request(self, body: Request, version: int) -> Any:
        """The decoded response (typed Any: tests know which response they asked for)."""
        self.send(body, version)
        correlation, response = self.receive(body.api_key, version)
        assert correlation == self.correlation
        return response

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """The next response, to a request of that API and version sent with `send`: its
        correlation id and the decoded body."""
        size = int.from_bytes(self.exactly(4), "big")
        return decode_response(self.exactly(size), api_key, version, strict=True)

    def exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return data

    def closed_by_broker(self) -> bool:
        """True once the broker has closed the connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True


def consumer_fetch(
    topic: str,
    offset: int,
    *,
    partition: int = 0,
    max_wait_ms: int = 0,
    partition_max_bytes: int = 1 << 20,
) -> FetchRequest:
    """A consumer's sessionless Fetch of one partition from `offset` (min_bytes 1)."""
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=partition,
                        fetch_offset=offset,
                        partition_max_bytes=partition_max_bytes,
                    )
                ],
            )
        ],
    )


def wait_unregistered(cluster: LocalCluster, broker_id: int, timeout: float = 60.0) -> None:
    """Until a killed broker's /brokers/ids/N has gone with its ZooKeeper session: only then
    can a new process register that id."""
    with zookeeper_client(cluster.zookeeper_connect) as client:
        wait_for(
            lambda: client.exists(znodes.broker_path(broker_id)) is None,
            timeout,
            f"broker {broker_id}'s registration to expire",
        )


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> BrokerProcess:
    return cluster.broker(partitions_of(cluster, topic)[partition].leader_id)
