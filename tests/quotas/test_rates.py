"""Byte-rate quotas hold real clients at their quota: producers and consumers of confluent-kafka
(librdkafka) and gregor-client, each under a 1 MB/s quota of its client id, converge to it
within +-15% over 20 s, while unquota'd clients beside them go clearly faster; and raising
the quota at run time raises the rate within 10 s.

Each client counts the bytes of the records the broker acknowledged (producers) or handed
out (consumers) with the time they arrived; a rate is the bytes between two instants over
the time between them. Each client's window starts once the quota's burst (11 s worth,
taken at once by a new client) is spent. Records are 1000 bytes and batches small (64 KB),
so what the broker counts (whole requests and responses) is within 2% of the records'
bytes. Nothing here asserts on how long anything takes: the rates are what the quota made.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import pytest

from gregor.client import AdminClient, Consumer, Producer
from gregor.client.admin import ClientQuotaEntity
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

QUOTA = 1_000_000  # bytes per second
VALUE = b"q" * 1000
BURST_S = 11.0  # quota.window.num x quota.window.size.seconds: what a new client may take
WINDOW_S = 20.0
BATCH = 65536
TOLERANCE = 0.15

pytestmark = pytest.mark.timeout(240)


class Progress:
    """A client's cumulative bytes over time, appended by its thread."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.totals: list[int] = []
        self.total = 0
        self.started = time.monotonic()

    def add(self, n: int) -> None:
        self.total += n
        self.times.append(time.monotonic())
        self.totals.append(self.total)

    def bytes_at(self, moment: float) -> int:
        i = bisect.bisect_right(self.times, moment)
        return self.totals[i - 1] if i else 0

    def rate(self, start: float, end: float) -> float:
        return (self.bytes_at(end) - self.bytes_at(start)) / (end - start)

    def first_reaching(self, total: int) -> float:
        """When the client had moved `total` bytes (its burst spent)."""
        i = bisect.bisect_left(self.totals, total)
        assert i < len(self.totals), f"only {self.total} bytes moved, {total} expected"
        return self.times[i]


class Worker(threading.Thread):
    def __init__(self, name: str, loop: Callable[[Progress, threading.Event], None]) -> None:
        super().__init__(name=name, daemon=True)
        self.loop = loop
        self.progress = Progress()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.loop(self.progress, self.stop)
        except BaseException as exc:  # reported by the test
            self.error = exc


def confluent_producer(
    bootstrap: str, topic: str, client_id: str, limit: float = float("inf")
) -> Worker:
    def loop(progress: Progress, stop: threading.Event) -> None:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "acks": 1,
                "linger.ms": 5,
                "batch.size": BATCH,
                "queue.buffering.max.kbytes": 2048,
            }
        )

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                progress.add(len(message.value()))

        while not stop.is_set() and progress.total < limit:
            try:
                producer.produce(topic, VALUE, on_delivery=delivered)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.purge()
        producer.flush(10)

    return Worker(client_id, loop)


def gregor_producer(bootstrap: str, topic: str, client_id: str) -> Worker:
    def loop(progress: Progress, stop: threading.Event) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": BATCH,
            "buffer.memory": 2 * 1024 * 1024,
        }

        def delivered(error: Any, metadata: Any) -> None:
            if error is None:
                progress.add(len(VALUE))

        with Producer(config) as producer:
            while not stop.is_set():
                producer.produce(topic, VALUE, on_delivery=delivered)
                producer.poll(0)

    return Worker(client_id, loop)


def confluent_consumer(bootstrap: str, topic: str, client_id: str) -> Worker:
    def loop(progress: Progress, stop: threading.Event) -> None:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "group.id": client_id,
                "enable.auto.commit": False,
                "fetch.max.bytes": BATCH,
                "max.partition.fetch.bytes": BATCH,
                "message.max.bytes": BATCH,  # librdkafka wants it <= fetch.max.bytes
            }
        )
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        try:
            while not stop.is_set():
                for message in consumer.consume(500, timeout=0.2):
                    if message.error() is None:
                        progress.add(len(message.value()))
        finally:
            consumer.close()

    return Worker(client_id, loop)


def gregor_consumer(bootstrap: str, topic: str, client_id: str) -> Worker:
    def loop(progress: Progress, stop: threading.Event) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": BATCH,
            "max.partition.fetch.bytes": BATCH,
        }
        with Consumer(config) as consumer:
            consumer.assign([(topic, 0)])
            while not stop.is_set():
                for record in consumer.consume(500, timeout=0.2):
                    progress.add(len(record.value))

    return Worker(client_id, loop)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop.set()
    for worker in started:
        worker.join(30)


def start(workers: list[Worker], *new: Worker) -> None:
    for worker in new:
        worker.start()
        workers.append(worker)


def fill(bootstrap: str, topic: str, total: int) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": BATCH}
    )
    for _ in range(total // len(VALUE)):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def wait_moved(worker: Worker, total: float, timeout: float) -> float:
    """Until the worker has moved `total` bytes; when it did."""
    deadline = time.monotonic() + timeout
    while worker.progress.total < total:
        assert worker.error is None, f"{worker.name} failed: {worker.error!r}"
        assert time.monotonic() < deadline, f"{worker.name} moved only {worker.progress.total}"
        time.sleep(0.2)
    return worker.progress.first_reaching(int(total))


def wait_until_time(moment: float) -> None:
    """Sleep to an instant of the clients' own clock: the end of a measuring window."""
    while (left := moment - time.monotonic()) > 0:
        time.sleep(min(left, 1.0))


def test_producers_and_consumers_converge_to_their_quota_beside_free_clients(
    quota_cluster: LocalCluster, workers: list[Worker]
) -> None:
    bootstrap = quota_cluster.bootstrap_servers
    produced, backlog = unique_topic("quota-in"), unique_topic("quota-backlog")
    create_topic(quota_cluster, produced, 1, 1)
    create_topic(quota_cluster, backlog, 1, 1)
    # Enough for both quota'd consumers' burst, their window, and the raised quota after.
    fill(bootstrap, backlog, 80_000_000)
    quotas: dict[str, str] = {
        "q-confluent-producer": "producer_byte_rate",
        "q-gregor-producer": "producer_byte_rate",
        "q-confluent-consumer": "consumer_byte_rate",
        "q-gregor-consumer": "consumer_byte_rate",
    }
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.alter_client_quotas(
            {ClientQuotaEntity({"client-id": c}): {k: float(QUOTA)} for c, k in quotas.items()}
        )
        limited = [
            confluent_producer(bootstrap, produced, "q-confluent-producer"),
            gregor_producer(bootstrap, produced, "q-gregor-producer"),
            confluent_consumer(bootstrap, backlog, "q-confluent-consumer"),
            gregor_consumer(bootstrap, backlog, "q-gregor-consumer"),
        ]
        start(workers, *limited)
        # Each limited client's window starts once it has spent its burst and a second more.
        starts = {w.name: wait_moved(w, QUOTA * (BURST_S + 1), 120) for w in limited}
        # Then the free clients run beside them: a producer of 100 MB, a consumer of the
        # backlog, each as fast as it goes; their rate is their bytes over their run.
        free_producer = confluent_producer(bootstrap, produced, "free-producer", 100_000_000)
        free_consumer = confluent_consumer(bootstrap, backlog, "free-consumer")
        start(workers, free_producer, free_consumer)
        wait_until_time(max(starts.values()) + WINDOW_S)
        rates = {
            w.name: w.progress.rate(starts[w.name], starts[w.name] + WINDOW_S) for w in limited
        }
        free = {}
        for worker in (free_producer, free_consumer):
            progress = worker.progress
            done = progress.first_reaching(progress.total)
            free[worker.name] = progress.total / (done - progress.started)
        print("rates under a 1 MB/s quota:", rates, "free:", free)
        for name, rate in rates.items():
            assert abs(rate / QUOTA - 1) <= TOLERANCE, f"{name}: {rate:.0f} B/s"
        assert all(rate > 3 * QUOTA for rate in free.values()), free

        # Doubling the quotas at run time doubles the rates within 10 s.
        admin.alter_client_quotas(
            {ClientQuotaEntity({"client-id": c}): {k: 2.0 * QUOTA} for c, k in quotas.items()}
        )
        changed = time.monotonic()
        wait_until_time(changed + 10 + WINDOW_S / 2)
        raised = {
            w.name: w.progress.rate(changed + 10, changed + 10 + WINDOW_S / 2) for w in limited
        }
        print("rates under a 2 MB/s quota:", raised)
        for name, rate in raised.items():
            assert abs(rate / (2 * QUOTA) - 1) <= TOLERANCE, f"{name}: {rate:.0f} B/s"
    for worker in workers:
        assert worker.error is None, f"{worker.name} failed: {worker.error!r}"
