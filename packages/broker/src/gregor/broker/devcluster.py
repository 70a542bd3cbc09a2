"""Real processes for local clusters and tests: ZooKeeper and gregor-broker.

Used by `nox -s cluster` (the README's main job) and by the test fixtures, so a test cluster
is started exactly the way an operator starts a local one: a `server.properties` file and the
`gregor-broker` command. Everything listens on 127.0.0.1 and on ports chosen at run time
unless told otherwise.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gregor.protocol.apis.api_versions import ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.create_topics import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from gregor.protocol.apis.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from gregor.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from gregor.protocol.apis.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from gregor.protocol.errors import ErrorCode, ProtocolError
from gregor.protocol.framing import decode_response, encode_request
from gregor.protocol.records import BatchBuilder, iter_batches
from gregor.protocol.schema import Request, Response
from gregor.storage.checkpoints import format_properties

ZOOKEEPER_JAR = Path(os.environ.get("GREGOR_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
LOOPBACK = "127.0.0.1"


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_handed_out: set[int] = set()
_ports_lock = threading.Lock()


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now, never the same twice in this process.

    It is drawn below the kernel's ephemeral range: the kernel's own choice (bind to port 0)
    can come back twice in a row, and a port from that range can be taken by any outgoing
    connection between now and the moment its server binds it.
    """
    high = max(_ephemeral_start() - 1, 11_000)
    with _ports_lock:
        while True:
            port = random.randint(10_000, high)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll `predicate()` until it is true; raise TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command ("ruok", "srvr", ...) and return the answer."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeper:
    """A standalone ZooKeeper server (Debian's `zookeeper` package) in a directory of its own.

    The tick is short (500 ms) so that session-expiry tests do not wait long; sessions may
    still be negotiated up to 60 s.
    """

    def __init__(self, directory: Path, port: int | None = None, host: str = LOOPBACK) -> None:
        self.directory = directory
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        """The `zookeeper.connect` string for this server."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    def start(self, timeout: float = 60.0) -> None:
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.exists():
            raise RuntimeError(
                f"ZooKeeper needs java and {ZOOKEEPER_JAR}; run infra/setup.sh to install them"
            )
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr,cons",
                    "maxClientCnxns=0",
                    "",
                ]
            )
        )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    java,
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",  # starts faster; ZooKeeper's load here is tiny
                    "-Dzookeeper.jmx.log4j.disable=true",
                    "-cp",
                    str(ZOOKEEPER_JAR),
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(config),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal is for the launcher alone
            )
        try:
            wait_until(self._ready, timeout, f"ZooKeeper on {self.connect}")
        except TimeoutError as exc:
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}; its log ends with:\n{tail}") from exc

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited with status {self.process.returncode}")
        return four_letter_word(self.host, self.port, "ruok") == "imok"

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """Stop gracefully (SIGTERM), then SIGKILL if it does not exit in time."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """SIGKILL: the server vanishes, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


def send_request(
    host: str, port: int, request: Request, version: int, timeout: float = 5.0
) -> Response:
    """One request on a fresh plain socket, and its decoded response (for scripts and tests).

    Raises OSError when the broker cannot be reached or hangs up, and the protocol's errors
    for a response that does not decode.
    """
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(encode_request(request, version, 1, "devcluster"))
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"{host}:{port} closed the connection before answering")
            data += chunk
    _, response = decode_response(data[4:], request.api_key, version)
    return response


def api_versions(host: str, port: int, timeout: float = 2.0) -> ApiVersionsResponse | None:
    """A broker's API versions, or None if it does not answer."""
    try:
        response = send_request(host, port, ApiVersionsRequest(), 0, timeout)
    except (OSError, ProtocolError):
        return None
    return response if isinstance(response, ApiVersionsResponse) else None


def _broker_command() -> list[str]:
    """`gregor-broker` from the running interpreter's environment (else `python -m`)."""
    script = Path(sys.executable).parent / "gregor-broker"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gregor.broker"]


class BrokerProcess:
    """One gregor-broker process with its own directory, `server.properties` and data.

    `properties` are added to (and override) the generated ones. The process is started in
    its own session, so a Ctrl-C in the launcher's terminal does not reach it.
    """

    def __init__(
        self,
        broker_id: int,
        directory: Path,
        zookeeper_connect: str,
        port: int | None = None,
        host: str = LOOPBACK,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.directory = directory
        self.zookeeper_connect = zookeeper_connect
        self.host = host
        self.port = port or free_port(host)
        self.extra = dict(properties or {})
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<BrokerProcess {self.broker_id} at {self.address}>"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def properties(self) -> dict[str, str]:
        props = {
            "broker.id": str(self.broker_id),
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.data_dir),
            "zookeeper.connect": self.zookeeper_connect,
            # Small clusters on one machine: fail over and notice lag quickly.
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "10000",
            "controlled.shutdown.retry.backoff.ms": "500",
        }
        props.update(self.extra)
        return props

    def write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(format_properties(self.properties(), "written by devcluster"))
        return self.config_path

    def launch(self) -> None:
        """Start the process without waiting for it (see `wait_ready`)."""
        if self.is_running():
            return
        self.write_config()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*_broker_command(), str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the broker answers ApiVersions; raise with its log's tail if it died."""
        try:
            wait_until(self._answers, timeout, f"broker {self.broker_id} on {self.address}")
        except (TimeoutError, RuntimeError) as exc:
            raise RuntimeError(f"{exc}; its log ends with:\n{self.log_tail()}") from exc

    def start(self, timeout: float = 60.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"broker {self.broker_id} exited with status {self.process.returncode}"
            )
        return api_versions(self.host, self.port, timeout=1.0) is not None

    def log_tail(self, size: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.is_running():
            assert self.process is not None
            self.process.send_signal(signum)

    def terminate(self) -> None:
        """SIGTERM: a graceful stop (controlled shutdown first); see `wait`."""
        self.resume()  # a stopped process cannot handle SIGTERM
        self.signal(signal.SIGTERM)

    def wait(self, timeout: float = 60.0) -> int | None:
        """Wait for the process to exit; SIGKILL it if it does not in time."""
        process = self.process
        if process is None:
            return None
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def stop(self, timeout: float = 60.0) -> int | None:
        """Graceful stop; SIGKILL if it takes longer than `timeout`. Returns the exit status."""
        self.terminate()
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the broker vanishes, as in a crash."""
        if self.is_running():
            assert self.process is not None
            self.process.kill()
            self.process.wait()

    def pause(self) -> None:
        """SIGSTOP: the broker freezes (its ZooKeeper session expires if this lasts)."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)


class LocalCluster:
    """A ZooKeeper (or a given `zookeeper_connect`) and N brokers, under one directory.

    `ports` fixes the brokers' ports (else free ones are chosen); broker ids are 0..N-1.
    """

    def __init__(
        self,
        directory: Path,
        brokers: int = 3,
        *,
        ports: Sequence[int] | None = None,
        zookeeper_port: int | None = None,
        zookeeper_connect: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        if ports is not None and len(ports) != brokers:
            raise ValueError(f"{brokers} brokers need {brokers} ports, not {list(ports)}")
        self.directory = directory
        self.zookeeper: ZooKeeper | None = None
        if zookeeper_connect is None:
            self.zookeeper = ZooKeeper(directory / "zookeeper", zookeeper_port)
            zookeeper_connect = self.zookeeper.connect
        self.zookeeper_connect = zookeeper_connect
        # Internal topics cannot have more replicas than there are brokers.
        properties = {
            "offsets.topic.replication.factor": str(min(3, brokers)),
            **(properties or {}),
        }
        self.brokers = [
            BrokerProcess(
                i,
                directory / f"broker-{i}",
                zookeeper_connect,
                port=ports[i] if ports is not None else None,
                properties=properties,
            )
            for i in range(brokers)
        ]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def start(self, timeout: float = 90.0) -> None:
        """Start ZooKeeper, then every broker at once; return when all answer."""
        try:
            if self.zookeeper is not None:
                self.zookeeper.start()
            for broker in self.brokers:
                broker.launch()
            for broker in self.brokers:
                broker.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 60.0) -> None:
        """Stop every broker gracefully (all at once), then ZooKeeper."""
        for broker in self.brokers:
            broker.terminate()
        for broker in self.brokers:
            broker.wait(timeout)
        if self.zookeeper is not None:
            self.zookeeper.stop()

    def kill(self) -> None:
        for broker in self.brokers:
            broker.kill()
        if self.zookeeper is not None:
            self.zookeeper.kill()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# -- the main job: a local cluster to play with ------------------------------------------------

DEMO_TOPIC = "demo"


def _controller(cluster: LocalCluster, timeout: float = 60.0) -> BrokerProcess:
    """The broker that is the controller, once the brokers know it."""
    found: list[BrokerProcess] = []

    def known() -> bool:
        broker = cluster.brokers[0]
        response = send_request(broker.host, broker.port, MetadataRequest(topics=[]), 9)
        assert isinstance(response, MetadataResponse)
        if response.controller_id < 0 or len(response.brokers) < len(cluster.brokers):
            return False
        found.append(cluster.broker(response.controller_id))
        return True

    wait_until(known, timeout, "the brokers to elect a controller")
    return found[-1]


def create_topic(
    cluster: LocalCluster, name: str, partitions: int, replication_factor: int
) -> None:
    """CreateTopics through the controller, as an admin client does; returns once every
    partition has a leader and a full ISR on every broker."""
    controller = _controller(cluster)
    request = CreateTopicsRequest(
        topics=[CreatableTopic(name, partitions, replication_factor)], timeout_ms=30_000
    )
    response = send_request(controller.host, controller.port, request, 5, timeout=40)
    assert isinstance(response, CreateTopicsResponse)
    result = response.topics[0]
    if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        raise RuntimeError(f"cannot create topic {name}: {result.error_message}")

    def ready() -> bool:
        for broker in cluster.brokers:
            request = MetadataRequest(topics=[MetadataRequestTopic(name=name)])
            answer = send_request(broker.host, broker.port, request, 9)
            assert isinstance(answer, MetadataResponse)
            parts = [p for t in answer.topics if t.error_code == 0 for p in t.partitions]
            if len(parts) != partitions or any(
                p.leader_id < 0 or len(p.isr_nodes) != replication_factor for p in parts
            ):
                return False
        return True

    wait_until(ready, 60, f"topic {name} to be ready on every broker")


def _leader(cluster: LocalCluster, topic: str, partition: int) -> BrokerProcess:
    broker = cluster.brokers[0]
    request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)])
    response = send_request(broker.host, broker.port, request, 9)
    assert isinstance(response, MetadataResponse)
    for p in response.topics[0].partitions:
        if p.partition_index == partition and p.leader_id >= 0:
            return cluster.broker(p.leader_id)
    raise RuntimeError(f"{topic}-{partition} has no leader")


def produce_and_consume_sample(cluster: LocalCluster, count: int = 5) -> list[tuple[int, bytes]]:
    """Produce `count` records to partition 0 (acks=all), then fetch them back."""
    leader = _leader(cluster, DEMO_TOPIC, 0)
    builder = BatchBuilder()
    for i in range(count):
        builder.append(f"hello from gregor #{i}".encode(), key=f"key-{i}".encode())
    produce = ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        topic_data=[TopicProduceData(DEMO_TOPIC, [PartitionProduceData(0, builder.build())])],
    )
    answer = send_request(leader.host, leader.port, produce, 9, timeout=40)
    assert isinstance(answer, ProduceResponse)
    result = answer.responses[0].partition_responses[0]
    if result.error_code != ErrorCode.NONE:
        raise RuntimeError(f"producing the sample failed with error {result.error_code}")
    fetch = FetchRequest(
        max_wait_ms=1000,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic=DEMO_TOPIC,
                partitions=[
                    FetchPartition(
                        partition=0, fetch_offset=result.base_offset, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    fetched = send_request(leader.host, leader.port, fetch, 11, timeout=10)
    assert isinstance(fetched, FetchResponse)
    records = fetched.responses[0].partitions[0].records
    assert isinstance(records, bytes | bytearray | memoryview)
    return [(r.offset, r.value or b"") for batch in iter_batches(records) for r in batch]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """`nox -s cluster`: ZooKeeper and three brokers on 127.0.0.1:9092-9094, until Ctrl-C."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--dir", default=".cluster", help="where every process keeps its data")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--port", type=int, default=9092, help="the first broker's port")
    parser.add_argument("--zookeeper-port", type=int, default=2181)
    args = parser.parse_args(argv)
    directory = Path(args.dir).absolute()
    cluster = LocalCluster(
        directory,
        args.brokers,
        ports=[args.port + i for i in range(args.brokers)],
        zookeeper_port=args.zookeeper_port,
    )
    # SIGTERM (nox's second step after Ctrl-C, or a plain `kill`) stops the cluster as
    # Ctrl-C does, so no ZooKeeper or broker outlives this process.
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"starting ZooKeeper and {args.brokers} brokers under {directory} ...", flush=True)
    cluster.start()
    try:
        create_topic(cluster, DEMO_TOPIC, 3, min(3, len(cluster.brokers)))
        for offset, value in produce_and_consume_sample(cluster):
            print(f"  {DEMO_TOPIC}-0 @ {offset}: {value.decode()}")
        print()
        print(f"bootstrap servers: {cluster.bootstrap_servers}")
        print(f"zookeeper:         {cluster.zookeeper_connect}")
        print(f"logs:              {directory}/broker-*/broker.log")
        print("running; press Ctrl-C to stop", flush=True)
        while all(b.is_running() for b in cluster.brokers):
            time.sleep(0.5)
        print("a broker exited; stopping the cluster", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    finally:
        cluster.stop()
        print("stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
