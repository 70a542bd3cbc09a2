"""gregor-broker as a process: configuration errors, SIGTERM, SIGKILL, idle connections."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from gregor.devcluster import LocalCluster, ZooKeeper
from gregor.protocol.apis.api_versions import ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.framing import decode_response, encode_request
from gregor.storage.manager import CLEAN_SHUTDOWN_FILE
from gregor_testing.cluster import (
    WireClient,
    consumer_fetch,
    create_topic,
    start_cluster,
    stop_cluster,
    unique_topic,
    wait_for,
    wait_unregistered,
)

Factory = Callable[..., LocalCluster]


def run_broker(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "server.properties"
    config.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "gregor.broker", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_invalid_config_stops_startup_naming_key_value_and_rule(tmp_path: Path) -> None:
    done = run_broker(tmp_path, "broker.id=1\nzookeeper.connect=127.0.0.1:1\nnum.partitions=zero\n")
    assert done.returncode == 1
    assert "Invalid value 'zero' for configuration num.partitions: must be an integer" in (
        done.stderr
    )
    done = run_broker(
        tmp_path,
        "broker.id=1\nzookeeper.connect=127.0.0.1:1\n",
        "--override",
        "replica.fetch.wait.max.ms=999999",
    )
    assert done.returncode == 1
    assert "replica.fetch.wait.max.ms: must not exceed replica.socket.timeout.ms" in done.stderr


def consume_all(cluster: LocalCluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "unused-no-commits",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        while len(values) < count:
            message = consumer.poll(15)
            assert message is not None, f"only {len(values)} of {count} records"
            assert message.error() is None, message.error()
            values.append(message.value())
        return values
    finally:
        consumer.close()


def test_sigterm_is_graceful_and_sigkill_loses_nothing_acknowledged(
    cluster_factory: Factory,
) -> None:
    cluster = cluster_factory(1)
    broker = cluster.broker(0)
    topic = unique_topic("crash")
    create_topic(cluster, topic)
    acked: list[bytes] = []
    stop = threading.Event()

    def produce_until_stopped() -> None:
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "1",
                "linger.ms": 1,
                "message.timeout.ms": 60_000,
            }
        )
        i = 0
        while not stop.is_set():
            value = f"record-{i}".encode()
            producer.produce(
                topic,
                value,
                partition=0,
                on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None,
            )
            producer.poll(0.001)
            i += 1
        producer.purge()  # the broker is dead: what is still queued does not matter

    writer = threading.Thread(target=produce_until_stopped)
    writer.start()
    try:
        wait_for(lambda: len(acked) >= 2000, 60, "records acknowledged before the kill")
        broker.kill()  # mid-stream: no chance to flush or close anything
        count = len(acked)
    finally:
        stop.set()
    writer.join(60)
    wait_unregistered(cluster, 0)
    broker.start()
    # Every record acknowledged before the kill is there, in order.
    values = consume_all(cluster, topic, count)
    assert values == acked[:count]
    # SIGTERM: a clean stop, which the next start sees.
    assert broker.stop() == 0
    assert (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    log = broker.log_tail(20_000)
    assert "SIGTERM received: stopping gracefully" in log
    assert "controlled shutdown succeeded" in log
    broker.start()
    assert not (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert consume_all(cluster, topic, count) == acked[:count]


def test_a_whole_cluster_stops_with_every_controlled_shutdown_complete(
    cluster_factory: Factory,
) -> None:
    # Stopping together: the last ones lead partitions that no one else can take over, and
    # the controller leaves while the others ask it. A broker may need one retry, as with
    # Kafka: one that asked the old controller has left the ISR, and the new controller
    # cannot know it is leaving, so a partition it follows still looks movable. (That no
    # retry waits on what can never move is tested on the controller, tests/controller.)
    cluster = cluster_factory(3, controlled_shutdown_retry_backoff_ms=1_000)
    create_topic(cluster, unique_topic("replicated"), partitions=6, replication_factor=3)
    create_topic(cluster, unique_topic("single"), partitions=3, replication_factor=1)
    for broker in cluster.brokers:
        broker.terminate()
    assert [broker.wait(60) for broker in cluster.brokers] == [0, 0, 0]
    for broker in cluster.brokers:
        log = broker.log_tail(50_000)
        assert "controlled shutdown succeeded" in log
        assert "did not complete" not in log


def test_sigterm_while_zookeeper_is_down_gives_up_controlled_shutdown_and_stops_cleanly(
    tmp_path: Path, own_zookeeper: ZooKeeper
) -> None:
    # Kafka's bound: each attempt waits zookeeper.connection.timeout.ms for ZooKeeper, then
    # the broker gives up on controlled shutdown and closes its logs as in any clean stop.
    cluster = start_cluster(
        tmp_path / "cluster", own_zookeeper, 1, {"zookeeper.connection.timeout.ms": "3000"}
    )
    try:
        broker = cluster.broker(0)
        topic = unique_topic("zk-down")
        create_topic(cluster, topic)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        producer.produce(topic, b"kept", partition=0)
        assert producer.flush(30) == 0
        own_zookeeper.stop()
        broker.terminate()
        assert broker.wait(120) == 0  # SIGKILLed (-9) if it had not stopped by then
        log = broker.log_tail(20_000)
        assert "ZooKeeper unreachable for 3s, so the controller cannot be found" in log
        assert "controlled shutdown did not complete; shutting down anyway" in log
        assert (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
        own_zookeeper.start()
        wait_unregistered(cluster, 0)  # its session could not be closed: it must expire
        broker.start()
        # The marker is consumed by a start that skipped recovery; the record is there.
        assert not (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
        assert consume_all(cluster, topic, 1) == [b"kept"]
    finally:
        stop_cluster(cluster, show_logs=True)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_thousand_idle_connections_cost_little(cluster_factory: Factory) -> None:
    cluster = cluster_factory(1)
    broker = cluster.broker(0)
    assert broker.pid is not None
    before = rss_kib(broker.pid)
    idle: list[socket.socket] = []
    try:
        for _ in range(1000):
            client = WireClient(broker)
            assert isinstance(client.request(ApiVersionsRequest(), 3), ApiVersionsResponse)
            idle.append(client.sock)
        grown = rss_kib(broker.pid) - before
        # Two sleeping tasks and a small buffer each: well under 100 KiB a connection.
        assert grown < 100 * 1000, f"{grown} KiB for 1000 idle connections"
        with WireClient(broker) as busy:
            assert isinstance(busy.request(ApiVersionsRequest(), 3), ApiVersionsResponse)
    finally:
        for sock in idle:
            sock.close()


def test_idle_connections_are_closed_but_not_a_slow_frame(cluster_factory: Factory) -> None:
    cluster = cluster_factory(1, connections_max_idle_ms=1000)
    broker = cluster.broker(0)
    with WireClient(broker) as idle, WireClient(broker) as slow:
        frame = encode_request(ApiVersionsRequest(), 3, 1, "slow-client")
        slow.sock.sendall(frame[:10])
        assert idle.closed_by_broker()  # nothing for connections.max.idle.ms
        slow.sock.sendall(frame[10:])  # the rest of a frame that started long ago
        size = int.from_bytes(slow.exactly(4), "big")
        _, response = decode_response(slow.exactly(size), 18, 3)
        assert isinstance(response, ApiVersionsResponse)
        assert slow.closed_by_broker()  # and then idle in turn


def test_a_connection_with_a_long_poll_in_flight_is_not_idle(cluster_factory: Factory) -> None:
    """A Fetch parked longer than connections.max.idle.ms keeps its connection: the answer
    comes at max_wait_ms, and only then does the idle time start."""
    cluster = cluster_factory(1, connections_max_idle_ms=500)
    topic = unique_topic("long-poll")
    create_topic(cluster, topic)
    request = consumer_fetch(topic, 0, max_wait_ms=1500)
    with WireClient(cluster.broker(0)) as waiting:
        asked = time.monotonic()
        (answer,) = waiting.request(request, 12).responses
        assert time.monotonic() - asked >= 1.4  # three idle periods parked, and answered
        (partition,) = answer.partitions
        assert partition.error_code == 0 and partition.high_watermark == 0
        assert waiting.closed_by_broker()  # then idle in turn
