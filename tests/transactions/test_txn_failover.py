"""Exactly once through failover, Jepsen style: a consume-transform-produce pipeline copies
topic `in` to topic `out` in transactions (two workers in one consumer group, read_committed,
offsets sent to each transaction) while a producer keeps writing `in`, and a nemesis
SIGKILLs the transaction coordinator's broker, then a partition leader of `out`, then the
controller, round robin, each restarted before the next. Afterwards the checker
(gregor_testing.checker) reads both topics with another client and finds every record of
`in` in `out` exactly once, in order per key, no aborted record read_committed, and the
deliberately aborted ones read_uncommitted. The pipeline runs with confluent-kafka and with
gregor-client. A worker whose client call hangs is replaced by a new one with the same
transactional id (`Workers`), and the run goes on.

The default run has 3 faults; `nox -s txn_faults` runs GREGOR_TXN_FAULTS (>= 100).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import threading
import time
from collections.abc import Callable

import pytest

from gregor.devcluster import LocalCluster, wait_until
from gregor_testing.checker import Ledger, check, committed_offsets, end_offsets, read_records
from gregor_testing.cluster import create_topic, unique_topic, wait_for
from gregor_testing.faults import (
    TRANSACTION_KEY,
    Nemesis,
    controller_id,
    find_coordinator,
    partition_leader,
)
from gregor_testing.pipelines import (
    ConfluentPipeline,
    GregorPipeline,
    Pipeline,
    PipelineFactory,
    PipelineSpec,
)

log = logging.getLogger(__name__)

pytestmark = pytest.mark.slow

PARTITIONS = 3
WORKERS = 2
KEYS = 20
FAULTS = int(os.environ.get("GREGOR_TXN_FAULTS", "3"))
MIN_RECORDS = 2000  # the source gets at least this many records
PROGRESS = 100  # records committed by the pipeline between two faults
HUNG_AFTER_S = 60  # a client call this old is hung (they time out after 30 s)
PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "300",
    "replica.lag.time.max.ms": "3000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
PIPELINES: dict[str, PipelineFactory] = {
    "confluent-kafka": ConfluentPipeline,
    "gregor-client": GregorPipeline,
}


class SourceWriter:
    """An idempotent confluent-kafka producer writing keyed records to `in` from a thread of
    its own, at a steady pace, until stopped (what it wrote is read back afterwards)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.acked = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="source-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)

    def _delivered(self, error: object, _message: object) -> None:
        if error is None:
            self.acked += 1
        else:
            self.errors.append(str(error))

    def _run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        def producer() -> Producer:
            return Producer(
                {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5}
            )

        writer = producer()
        sequence = 0
        while not self._stop.is_set():
            key = f"k{sequence % KEYS:02d}".encode()
            try:
                value = f"{key.decode()}-{sequence:08d}".encode()
                writer.produce(self.topic, value, key, on_delivery=self._delivered)
            except BufferError:
                writer.poll(0.1)
                continue
            except KafkaException as exc:  # fatal (idempotence): a new producer goes on
                self.errors.append(str(exc))
                writer.flush(30)
                writer = producer()
                continue
            sequence += 1
            writer.poll(0)
            if sequence % 20 == 0:
                time.sleep(0.1)  # about 200 records a second
        writer.flush(120)


class Workers:
    """The pipeline's workers, each running in a thread of its own. A watchdog replaces a
    worker whose client call has been under way for HUNG_AFTER_S (it never returns) with a
    new one of the same spec, as an application's supervisor would; the replacements are
    counted in `replaced`."""

    def __init__(self, factory: PipelineFactory, specs: list[PipelineSpec], ledger: Ledger) -> None:
        self.factory = factory
        self.ledger = ledger
        self.stop_event = threading.Event()
        self.failures: list[BaseException] = []
        self.replaced: list[str] = []
        self.pipelines: list[Pipeline] = []
        self.threads: list[threading.Thread] = []
        for spec in specs:
            self._start(factory(spec, ledger))
        self._watchdog = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._watchdog.start()

    def _start(self, pipeline: Pipeline) -> None:
        thread = threading.Thread(target=self._run, args=(pipeline,), daemon=True)
        self.pipelines.append(pipeline)
        self.threads.append(thread)
        thread.start()

    def _run(self, pipeline: Pipeline) -> None:
        try:
            pipeline.run(self.stop_event)
        except BaseException as exc:
            if pipeline.abandoned:
                return  # replaced: what its hung call did afterwards does not matter
            log.exception("a pipeline worker failed")
            self.failures.append(exc)

    def _watch(self) -> None:
        while not self.stop_event.wait(1.0):
            for pipeline in list(self.pipelines):
                call = pipeline.calling
                if pipeline.abandoned or call is None:
                    continue
                hung_for = time.monotonic() - call[1]
                if hung_for < HUNG_AFTER_S:
                    continue
                what = f"{pipeline.spec.transactional_id}: {call[0]} for {hung_for:.0f} s"
                log.warning("replacing the hung worker %s", what)
                faulthandler.dump_traceback(all_threads=True)  # where it hangs
                self.replaced.append(what)
                self.ledger.event(f"hung {call[0]}, worker replaced")
                try:
                    pipeline.abandon()
                except Exception:
                    log.exception("abandoning %s", what)
                self._start(self.factory(pipeline.spec, self.ledger))

    def live(self) -> list[tuple[Pipeline, threading.Thread]]:
        return [
            (p, t) for p, t in zip(self.pipelines, self.threads, strict=True) if not p.abandoned
        ]

    def stop(self) -> None:
        self.stop_event.set()
        self._watchdog.join(30)
        for _, thread in self.live():
            thread.join(120)
        stuck = [(p, t) for p, t in self.live() if t.is_alive()]
        if stuck:
            faulthandler.dump_traceback(all_threads=True)  # where they are stuck
        for pipeline, _ in stuck:
            if pipeline.calling is None:
                raise AssertionError("a pipeline worker did not stop")
            # Hung in a client call as the run ended: what a replacement would have been for.
            self.replaced.append(f"{pipeline.spec.transactional_id}: {pipeline.calling[0]}")
            pipeline.abandon()


def copy_through_faults(cluster: LocalCluster, factory: PipelineFactory, faults: int) -> None:
    source, sink = "in", "out"
    for topic in (source, sink):
        create_topic(
            cluster, topic, PARTITIONS, 3, configs={"min.insync.replicas": "2"}, timeout=60
        )
    group = unique_topic("copy")
    specs = [
        PipelineSpec(cluster.bootstrap_servers, source, sink, group, f"{group}-worker-{i}")
        for i in range(WORKERS)
    ]
    ledger = Ledger()
    nemesis = Nemesis(
        cluster,
        {
            "transaction coordinator": lambda: (
                find_coordinator(
                    cluster, specs[len(nemesis.faults) % WORKERS].transactional_id, TRANSACTION_KEY
                ).broker_id
            ),
            "partition leader": lambda: partition_leader(
                cluster, sink, len(nemesis.faults) % PARTITIONS
            ),
            "controller": lambda: controller_id(cluster),
        },
    )
    writer = SourceWriter(cluster.bootstrap_servers, source)
    workers = Workers(factory, specs, ledger)
    try:
        for _ in range(faults):
            target = ledger.committed_records() + PROGRESS
            wait_for(
                lambda t=target: ledger.committed_records() >= t, 240, "the pipeline's progress"
            )
            nemesis.strike()
        wait_for(lambda: writer.acked >= MIN_RECORDS, 120, f"{MIN_RECORDS} source records")
        writer.stop()
        ends = end_offsets(cluster, source, PARTITIONS)
        wait_until(
            lambda: committed_offsets(cluster, group, source) == ends,
            180,
            f"the group's offsets at the source's end {ends}",
            interval=1.0,
        )
    except TimeoutError:
        faulthandler.dump_traceback(all_threads=True)  # where the workers are
        raise
    finally:
        writer.stop()
        workers.stop()
    assert workers.failures == []
    records = read_records(cluster, source, PARTITIONS, "read_uncommitted")
    report = check(
        records,
        read_records(cluster, sink, PARTITIONS, "read_committed"),
        read_records(cluster, sink, PARTITIONS, "read_uncommitted"),
        ledger,
    )
    print(
        f"{len(nemesis.faults)} faults: {nemesis.faults}\n{report}\n"
        f"transactions committed {len(ledger.committed)}, aborted {len(ledger.aborted)}; "
        f"events {dict(ledger.events)}; source writer errors {len(writer.errors)}; "
        f"hung workers replaced {len(workers.replaced)}: {workers.replaced}"
    )
    assert report.problems == []
    assert len(nemesis.faults) == faults
    assert ledger.aborted_written, "no transaction was aborted after its records were written"
    assert report.source_records >= MIN_RECORDS


@pytest.mark.parametrize("client", list(PIPELINES))
def test_copy_exactly_once_through_faults(
    cluster_factory: Callable[..., LocalCluster], client: str
) -> None:
    cluster = cluster_factory(3, **PROPERTIES)
    copy_through_faults(cluster, PIPELINES[client], FAULTS)
