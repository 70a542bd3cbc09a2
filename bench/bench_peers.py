"""The Kafka paper's experiment (seed 002), repeated on this machine: Gregor against RabbitMQ,
ActiveMQ and NATS JetStream, in one run.

The paper's settings: 200-byte messages, one topic (queue, stream), one producer sending one
message at a time and then in batches of 50, then one consumer reading everything back.
Unlike the paper's Kafka 0.7 producer, every write here is durable and acknowledged, on
every system, in each system's fastest durable mode (named in the output): a message
counts once the broker has acknowledged it, and a batch of 50 is sent and acknowledged
before the next. The consumer's clock starts once it is connected, before it subscribes
(or is assigned its partition), and stops at the last message.

Each peer is the Debian package (infra/peers.sh installs them), started here as a process
of this run with its data in a temporary directory, on free ports of 127.0.0.1, and stopped
at the end, also on failure. Clients: pika's asyncio sibling aio-pika (RabbitMQ, AMQP
0-9-1), stomp.py (ActiveMQ, STOMP), nats-py (NATS); Gregor is driven by confluent-kafka and
by gregor-client. Everything shares the same 2 cores, clients included: the ratios are the
point. Goals from the paper: Gregor at least 2x each peer on batched produce and 4x on
consume.

    python bench/bench_peers.py [--messages N] [--single N] [--rounds R] [--only NAME ...]
        [--chart PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import resource
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, NamedTuple

# bench_broker's CPU accounting: this script runs from bench/, beside it.
from bench_broker import cpu_seconds, process_tree

VALUE = b"m" * 200
BATCH = 50
PHASES = ("produce 1", f"produce {BATCH}", "consume")
GOALS = {f"produce {BATCH}": 2.0, "consume": 4.0}
RESULTS = Path(__file__).parent / "results"


# -- starting and stopping the peers ---------------------------------------------------------


def free_port() -> int:
    from gregor.devcluster import free_port as devcluster_free_port

    return devcluster_free_port()


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


@contextlib.contextmanager
def server(
    name: str, argv: list[str], log: Path, port: int, env: dict[str, str] | None = None
) -> Iterator[int]:
    """`argv` running (in a session of its own, dying with this process) until the block
    ends, once it accepts connections on `port`; yields its pid. Stopped with SIGTERM to
    its whole process group (a start script's children too), SIGKILL after 60 s."""
    from gregor.devcluster import Supervised, wait_until

    process = Supervised(name, log)
    environment = [f"{k}={v}" for k, v in (env or {}).items()]
    process.spawn(["env", *environment, *argv] if environment else argv)
    assert process.pid is not None
    group = process.pid  # start_new_session: the group's id is the leader's pid
    try:

        def up() -> bool:
            process.check_alive()
            return listening(port)

        try:
            wait_until(up, 120, f"{name} on port {port}", interval=0.2)
        except (TimeoutError, RuntimeError) as exc:
            raise RuntimeError(f"{exc}\n{process.log_tail()}") from exc
        yield group
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        process.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)  # what the leader left behind


class Served(NamedTuple):
    address: str
    pids: list[int]  # the server's processes (with their children), for their CPU time


@contextlib.contextmanager
def gregor(directory: Path) -> Iterator[Served]:
    from gregor.devcluster import LocalCluster

    cluster = LocalCluster(directory, 1, properties={"gregor.metrics.log.interval.ms": "0"})
    cluster.start()
    try:
        yield Served(cluster.bootstrap_servers, [b.pid for b in cluster.brokers if b.pid])
    finally:
        cluster.stop()


@contextlib.contextmanager
def rabbitmq(directory: Path) -> Iterator[Served]:
    """A RabbitMQ node of its own (name, cookie, Mnesia, ports), with an epmd of its own."""
    port, epmd_port = free_port(), free_port()
    (directory / "enabled_plugins").write_text("[].\n")
    (directory / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{port}\n")
    env = {
        "HOME": str(directory),  # its .erlang.cookie
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_NODENAME": "bench@localhost",
        "RABBITMQ_DIST_PORT": str(free_port()),
        "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
        "RABBITMQ_LOG_BASE": str(directory / "log"),
        "RABBITMQ_LOGS": "-",
        "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "enabled_plugins"),
    }
    epmd = ["epmd", "-port", str(epmd_port)]
    with server("epmd", epmd, directory / "epmd.log", epmd_port) as epmd_pid:
        command = ["/usr/lib/rabbitmq/bin/rabbitmq-server"]
        with server("rabbitmq-server", command, directory / "rabbitmq.log", port, env) as pid:
            yield Served(f"amqp://guest:guest@127.0.0.1:{port}/", [pid, epmd_pid])


ACTIVEMQ_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
    http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
    http://activemq.apache.org/schema/core
    http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="bench" useJmx="false"
          persistent="true" schedulerSupport="false" advisorySupport="false"
          dataDirectory="{data}">
    <persistenceAdapter>
      <!-- the journal flushed to disk once a second, not at every send: the paper's
           "asynchronously flush messages to its persistence store", as Gregor does -->
      <kahaDB directory="{data}/kahadb" journalDiskSyncStrategy="periodic"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}?transport.tcpNoDelay=true"/>
    </transportConnectors>
  </broker>
</beans>
"""


@contextlib.contextmanager
def activemq(directory: Path) -> Iterator[Served]:
    port = free_port()
    conf, data = directory / "conf", directory / "data"
    conf.mkdir()
    (conf / "activemq.xml").write_text(ACTIVEMQ_XML.format(data=data, port=port))
    home = "/usr/share/activemq"
    command = [
        "java",
        "-Xms512M",
        "-Xmx512M",  # Debian's service settings (/usr/share/activemq/activemq-options)
        f"-Dactivemq.home={home}",
        f"-Dactivemq.base={directory}",
        f"-Dactivemq.conf={conf}",
        f"-Dactivemq.data={data}",
        f"-Djava.io.tmpdir={directory}",
        "-jar",
        f"{home}/bin/activemq.jar",
        "start",
        f"xbean:file:{conf / 'activemq.xml'}",
    ]
    with server("activemq", command, directory / "activemq.log", port) as pid:
        yield Served(f"127.0.0.1:{port}", [pid])


@contextlib.contextmanager
def nats(directory: Path) -> Iterator[Served]:
    port = free_port()
    command = ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(directory)]
    with server("nats-server", command, directory / "nats.log", port) as pid:
        yield Served(f"nats://127.0.0.1:{port}", [pid])


# -- the clients: each returns seconds -------------------------------------------------------


def batches(count: int, batch: int) -> Iterator[int]:
    """The sizes of the batches that send `count` messages `batch` at a time."""
    for start in range(0, count, batch):
        yield min(batch, count - start)


def confluent_produce(bootstrap: str, topic: str, count: int, batch: int) -> float:
    from confluent_kafka import Producer

    errors: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            # A batch leaves when its 50th message is queued (flush() would send it anyway).
            "linger.ms": 1000 if batch > 1 else 0,
            "batch.num.messages": batch,
            "delivery.report.only.error": True,
            "error_cb": errors.append,
        }
    )
    produce, flush = producer.produce, producer.flush
    produce(topic, VALUE, partition=0)
    flush(30)  # metadata and connection, before the clock starts
    started = time.perf_counter()
    for size in batches(count, batch):
        for _ in range(size):
            produce(topic, VALUE, partition=0, on_delivery=lambda e, _m: errors.append(e))
        if flush(30):
            raise RuntimeError("a batch was not acknowledged within 30 s")
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"confluent-kafka: {errors[:3]}")
    return elapsed


def confluent_consume(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-peers", "enable.auto.commit": False}
    )
    try:
        consumer.list_topics(topic, 30)  # connected, before the clock starts
        started, seen = time.perf_counter(), 0
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while seen < count:
            got = consumer.consume(min(10_000, count - seen), 10)
            if not got:
                raise RuntimeError(f"confluent-kafka stalled after {seen} of {count}")
            seen += sum(1 for m in got if m.error() is None)
        return time.perf_counter() - started
    finally:
        consumer.close()


def gregor_produce(bootstrap: str, topic: str, count: int, batch: int) -> float:
    from gregor.client import Producer

    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0 if batch == 1 else 1000}
    with Producer(config) as producer:
        produce, flush = producer.produce, producer.flush
        producer.produce(topic, VALUE, partition=0).result(30)
        started = time.perf_counter()
        for size in batches(count, batch):
            futures = [produce(topic, VALUE, partition=0) for _ in range(size)]
            if flush(30):
                raise RuntimeError("a batch was not acknowledged within 30 s")
            futures[-1].result(0)  # raises the batch's error, if it failed
        return time.perf_counter() - started


def gregor_consume(bootstrap: str, topic: str, count: int) -> float:
    from gregor.client import Consumer, TopicPartition

    config = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.position(TopicPartition(topic, 0))  # connected, before the clock starts
        started, seen = time.perf_counter(), 0
        while seen < count:
            got = consumer.consume(min(10_000, count - seen), timeout=10)
            if not got:
                raise RuntimeError(f"gregor-client stalled after {seen} of {count}")
            seen += len(got)
        return time.perf_counter() - started


def rabbitmq_produce(url: str, queue: str, count: int, batch: int) -> float:
    import aio_pika

    async def run() -> float:
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue(queue, durable=True)
            publish = channel.default_exchange.publish
            message = aio_pika.Message(VALUE, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
            started = time.perf_counter()
            for size in batches(count, batch):
                # Each publish returns once its confirm arrives; a batch waits for all 50.
                await asyncio.gather(*(publish(message, queue) for _ in range(size)))
            return time.perf_counter() - started

    return asyncio.run(run())


def rabbitmq_consume(url: str, queue: str, count: int) -> float:
    import aio_pika

    async def run() -> float:
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            declared = await channel.declare_queue(queue, durable=True)
            seen, done = 0, asyncio.Event()

            async def received(_message: Any) -> None:
                nonlocal seen
                seen += 1
                if seen == count:
                    done.set()

            started = time.perf_counter()
            await declared.consume(received, no_ack=True)  # the paper's automatic acks
            await asyncio.wait_for(done.wait(), 600)
            return time.perf_counter() - started

    return asyncio.run(run())


class StompWaiter:
    """stomp.py's listener: RECEIPT frames awaited by id, MESSAGE frames counted."""

    def __init__(self, expected: int = 0) -> None:
        self.changed = threading.Condition()
        self.receipts: set[str] = set()
        self.errors: list[str] = []
        self.expected, self.seen = expected, 0

    def on_receipt(self, frame: Any) -> None:
        with self.changed:
            self.receipts.add(frame.headers["receipt-id"])
            self.changed.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.changed:
            self.errors.append(f"{frame.headers.get('message')}: {frame.body!r}")
            self.changed.notify_all()

    def on_message(self, _frame: Any) -> None:
        self.seen += 1
        if self.seen == self.expected:
            with self.changed:
                self.changed.notify_all()

    def wait(self, ready: Callable[[], bool], what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: ready() or bool(self.errors), 600):
                raise TimeoutError(f"ActiveMQ: still waiting for {what} after 600 s")
            if self.errors:
                raise RuntimeError(f"ActiveMQ: {self.errors[0]}")


@contextlib.contextmanager
def stomp_connection(address: str, listener: StompWaiter) -> Iterator[Any]:
    import stomp

    host, port = address.rsplit(":", 1)
    connection = stomp.Connection([(host, int(port))], auto_decode=False)
    connection.set_listener("bench", listener)
    connection.connect(wait=True)
    # stomp.py leaves Nagle's algorithm on: a transaction's frames, written back to back,
    # would wait for the broker's delayed ACK (40 ms) at every commit.
    connection.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        yield connection
    finally:
        connection.disconnect()


def activemq_produce(address: str, queue: str, count: int, batch: int) -> float:
    listener = StompWaiter()
    destination = f"/queue/{queue}"
    with stomp_connection(address, listener) as connection:
        started = time.perf_counter()
        for n, size in enumerate(batches(count, batch)):
            receipt = str(n)
            if batch == 1:  # a sync send: the receipt comes once the message is stored
                headers = {"persistent": "true", "receipt": receipt}
                connection.send(destination, VALUE, headers=headers)
            else:  # a transaction of 50, its commit acknowledged by a receipt
                transaction = connection.begin()
                for _ in range(size):
                    connection.send(
                        destination, VALUE, headers={"persistent": "true"}, transaction=transaction
                    )
                connection.commit(transaction, headers={"receipt": receipt})
            listener.wait(functools.partial(listener.receipts.__contains__, receipt), receipt)
        return time.perf_counter() - started


def activemq_consume(address: str, queue: str, count: int) -> float:
    listener = StompWaiter(count)
    with stomp_connection(address, listener) as connection:
        started = time.perf_counter()
        connection.subscribe(
            f"/queue/{queue}", id="bench", ack="auto", headers={"activemq.prefetchSize": "1000"}
        )
        listener.wait(lambda: listener.seen >= count, f"{count} messages")
        return time.perf_counter() - started


async def jetstream(url: str, stream: str) -> Any:
    import nats
    from nats.js.api import StorageType

    connection = await nats.connect(url)
    js = connection.jetstream()
    await js.add_stream(name=stream, subjects=[stream], storage=StorageType.FILE)
    return connection, js


def nats_produce(url: str, stream: str, count: int, batch: int) -> float:
    async def run() -> float:
        connection, js = await jetstream(url, stream)
        try:
            publish = js.publish
            started = time.perf_counter()
            for size in batches(count, batch):
                # Each publish returns once JetStream's ack (stored in the stream) arrives.
                await asyncio.gather(*(publish(stream, VALUE) for _ in range(size)))
            return time.perf_counter() - started
        finally:
            await connection.close()

    return asyncio.run(run())


def nats_consume(url: str, stream: str, count: int) -> float:
    from nats.js.api import AckPolicy, ConsumerConfig

    async def run() -> float:
        connection, js = await jetstream(url, stream)
        try:
            config = ConsumerConfig(ack_policy=AckPolicy.NONE)  # the paper's automatic acks
            subscription = await js.pull_subscribe(stream, durable="bench", config=config)
            started, seen = time.perf_counter(), 0
            while seen < count:
                got = await subscription.fetch(min(1000, count - seen), timeout=10)
                seen += len(got)
            return time.perf_counter() - started
        finally:
            await connection.close()

    return asyncio.run(run())


# -- the systems -----------------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    name: str
    client: str  # the Python client's distribution, for its version
    mode: str  # its fastest durable, acknowledged mode, as run here
    server: Callable[[Path], contextlib.AbstractContextManager[Served]]
    produce: Callable[[str, str, int, int], float]
    consume: Callable[[str, str, int], float]
    package: str | None = None  # the server's Debian package, for its version


GREGOR_MODE = "acks=all; log flushed by the OS (Kafka's default)"
SYSTEMS = [
    System("gregor/confluent", "confluent-kafka", GREGOR_MODE, gregor, confluent_produce,
           confluent_consume),
    System("gregor/gregor-client", "gregor-client", GREGOR_MODE, gregor, gregor_produce,
           gregor_consume),
    System("rabbitmq", "aio-pika",
           "durable queue, persistent messages, publisher confirms; auto-ack consumer",
           rabbitmq, rabbitmq_produce, rabbitmq_consume, "rabbitmq-server"),
    System("activemq", "stomp.py",
           "persistent, KahaDB synced each second; sync sends / transactions of 50 with a "
           "receipt; auto-ack consumer",
           activemq, activemq_produce, activemq_consume, "activemq"),
    System("nats", "nats-py", "JetStream file storage, publish acks; pull consumer, no acks",
           nats, nats_produce, nats_consume, "nats-server"),
]  # fmt: skip
PEERS = [s.name for s in SYSTEMS if not s.name.startswith("gregor")]


Rates = dict[str, float]  # msg/s per phase
Cores = dict[str, tuple[float, float]]  # per phase: the cores the client and the server kept busy


def server_cpu(roots: list[int]) -> float:
    total = 0.0
    for pid in (p for root in roots for p in process_tree(root)):
        with contextlib.suppress(OSError):  # a short-lived child may be gone already
            total += cpu_seconds([pid])
    return total


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def phase(served: Served, work: Callable[[], float]) -> tuple[float, tuple[float, float]]:
    """(seconds `work` reports, (client cores, server cores) busy meanwhile)."""
    client, server_ = client_cpu(), server_cpu(served.pids)
    began = time.perf_counter()
    seconds = work()
    wall = time.perf_counter() - began
    cores = (client_cpu() - client) / wall, (server_cpu(served.pids) - server_) / wall
    return seconds, cores


def measure(
    system: System, served: Served, single: int, messages: int, round_: int
) -> tuple[Rates, Cores]:
    """Each phase's msg/s and cores, on a queue of its own: `single` messages one at a
    time, `messages` in batches, then all of them consumed."""
    queue, address = f"bench{round_}", served.address
    if system.name.startswith("gregor"):
        queue = f"{queue}-{system.client}"
        create_gregor_topic(address, queue)
    # Gregor's topic also holds each producer's warm-up message, which its consumer reads.
    total = single + messages + (2 if system.name.startswith("gregor") else 0)
    works = {
        PHASES[0]: (single, functools.partial(system.produce, address, queue, single, 1)),
        PHASES[1]: (messages, functools.partial(system.produce, address, queue, messages, BATCH)),
        PHASES[2]: (total, functools.partial(system.consume, address, queue, total)),
    }
    rates: Rates = {}
    cores: Cores = {}
    for name, (count, work) in works.items():
        seconds, cores[name] = phase(served, work)
        rates[name] = count / seconds
    return rates, cores


def create_gregor_topic(bootstrap: str, topic: str) -> None:
    from gregor.client import AdminClient, NewTopic

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])


def versions() -> dict[str, str]:
    """The servers' Debian versions and the clients' PyPI versions."""
    found = {}
    for package in (s.package for s in SYSTEMS if s.package):
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True
        )
        found[package] = done.stdout.strip() or "not installed"
    for system in SYSTEMS:
        found[system.client] = version(system.client)
    return found


def run(args: argparse.Namespace) -> tuple[dict[str, Rates], dict[str, Cores]]:
    """Every chosen system's best rate per phase over the rounds, and the cores then busy."""
    results: dict[str, Rates] = {}
    busy: dict[str, Cores] = {}
    chosen = [s for s in SYSTEMS if s.name in args.only]
    for server_fn in dict.fromkeys(s.server for s in chosen):
        with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
            print(f"starting {server_fn.__name__}", flush=True)
            with server_fn(Path(tmp)) as served:
                for system in (s for s in chosen if s.server is server_fn):
                    for round_ in range(args.rounds):
                        rates, cores = measure(system, served, args.single, args.messages, round_)
                        best = results.setdefault(system.name, dict.fromkeys(PHASES, 0.0))
                        for name, rate in rates.items():
                            if rate > best[name]:
                                best[name] = rate
                                busy.setdefault(system.name, {})[name] = cores[name]
                        cells = "  ".join(
                            f"{p} {r:>9,.0f} ({cores[p][0]:.2f}+{cores[p][1]:.2f} cores)"
                            for p, r in rates.items()
                        )
                        print(f"  {system.name:<22} {cells}", flush=True)
    return results, busy


# -- the report ------------------------------------------------------------------------------


def ratios(results: dict[str, dict[str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """Each Gregor client's rate over each peer's, per phase: {gregor: {peer: {phase: x}}}."""
    return {
        ours: {
            peer: {p: results[ours][p] / results[peer][p] for p in PHASES}
            for peer in results
            if peer in PEERS
        }
        for ours in results
        if ours not in PEERS
    }


def table(results: dict[str, dict[str, float]]) -> str:
    mb = len(VALUE) / 1e6
    lines = [f"{'system':<22}" + "".join(f"{p + ' msg/s':>17}{'MB/s':>7}" for p in PHASES)]
    for name, rates in results.items():
        lines.append(
            f"{name:<22}" + "".join(f"{rates[p]:>17,.0f}{rates[p] * mb:>7.1f}" for p in PHASES)
        )
    lines += ["", "Gregor / peer (goal in brackets)"]
    for ours, peers in ratios(results).items():
        for peer, by_phase in peers.items():
            cells = []
            for name, ratio in by_phase.items():
                goal = GOALS.get(name)
                verdict = (
                    "" if goal is None else f" [{goal:g}] {'ok' if ratio >= goal else 'MISSED'}"
                )
                cells.append(f"{name} {ratio:6.2f}x{verdict}")
            lines.append(f"  {ours:<21} vs {peer:<9} " + "   ".join(cells))
    return "\n".join(lines)


def markdown(record: dict[str, Any]) -> str:
    """The figures of a run (its JSON record) as docs/performance.md shows them."""
    results: dict[str, dict[str, float]] = record["msg_per_s"]
    mb = len(VALUE) / 1e6
    lines = [
        "| system | client | durable, acknowledged mode | "
        + " | ".join(f"{p} msg/s (MB/s)" for p in PHASES)
        + " |",
        "|---|---|---|" + "---:|" * len(PHASES),
    ]
    systems = {s.name: s for s in SYSTEMS}
    found = record["versions"]
    for name, rates in results.items():
        system = systems[name]
        server = f" {found[system.package].split('-')[0]}" if system.package else ""
        cells = [f"{rates[p]:,.0f} ({rates[p] * mb:.1f})" for p in PHASES]
        mode = record["modes"][name]
        lines.append(
            f"| {name}{server} | {system.client} {found[system.client]} | {mode} | "
            + " | ".join(cells)
            + " |"
        )
    header = " | ".join(PHASES) + " |\n|---|" + "---:|" * len(PHASES)
    lines += ["", f"| Gregor / peer | {header}"]
    for ours, peers in ratios(results).items():
        for peer, by_phase in peers.items():
            cells = []
            for name, ratio in by_phase.items():
                goal = GOALS.get(name)
                mark = "" if goal is None else (" ✓" if ratio >= goal else f" ✗ (goal {goal:g}x)")
                cells.append(f"{ratio:.2f}x{mark}")
            lines.append(f"| {ours} / {peer} | " + " | ".join(cells) + " |")
    lines += ["", f"| cores busy: client + server (msg per server CPU-s) | {header}"]
    for name, cores in record["cores_client_server"].items():
        cells = [
            f"{cores[p][0]:.2f} + {cores[p][1]:.2f} ({results[name][p] / cores[p][1] / 1000:,.0f}k)"
            for p in PHASES
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(results: dict[str, dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4), dpi=100)
    width = 0.8 / len(results)
    for i, (name, rates) in enumerate(results.items()):
        xs = [x + (i - (len(results) - 1) / 2) * width for x in range(len(PHASES))]
        bars = axes.bar(xs, [rates[p] for p in PHASES], width, label=name)
        labels = [f"{rates[p] / 1000:.{1 if rates[p] < 10_000 else 0}f}k" for p in PHASES]
        axes.bar_label(bars, labels, fontsize=7)
    axes.set_xticks(range(len(PHASES)), [f"{p} (msg/s)" for p in PHASES])
    axes.set_yscale("log")
    axes.set_ylabel("messages/s (200 bytes), log scale")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def main() -> int:
    names = [s.name for s in SYSTEMS]
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000, help="sent in batches of 50")
    parser.add_argument("--single", type=int, default=5_000, help="sent one at a time")
    parser.add_argument("--rounds", type=int, default=1, help="keep each phase's best")
    parser.add_argument("--only", nargs="*", choices=names, default=names)
    parser.add_argument("--chart", type=Path, default=RESULTS / "peers.png")
    parser.add_argument("--json", type=Path, default=RESULTS / "peers.json")
    args = parser.parse_args()
    print(
        f"{len(VALUE)}-byte messages: {args.single:,} sent one at a time, {args.messages:,} in "
        f"batches of {BATCH}, then all consumed; best of {args.rounds} round(s)"
    )
    found = versions()
    for system in SYSTEMS:
        if system.name in args.only:
            print(f"  {system.name:<22} ({system.client} {found[system.client]}): {system.mode}")
    results, busy = run(args)
    print()
    print(table(results))
    title = (
        f"{args.single:,} + {args.messages:,} messages, one producer, one consumer, "
        "acknowledged durable writes"
    )
    chart(results, args.chart, title)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "single": args.single,
        "messages": args.messages,
        "rounds": args.rounds,
        "versions": found,
        "modes": {s.name: s.mode for s in SYSTEMS if s.name in results},
        "msg_per_s": results,
        "cores_client_server": busy,
    }
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\n{markdown(record)}")
    print(f"\nchart: {args.chart}\nfigures: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
