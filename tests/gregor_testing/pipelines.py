"""Consume-transform-produce pipelines, one per client, behind one small interface, so a
Jepsen-style test runs them all the same way (tests/transactions/test_txn_failover.py).

A pipeline worker consumes the source as a member of a consumer group, read_committed, and
copies each batch it gets in one transaction: every record to the same partition of the
sink with its key, its value tagged with the transaction (`checker.tagged`), and the
group's next offsets sent to the transaction. It tells the `Ledger` what each transaction
wrote and how it ended. Every `abort_every`-th transaction is aborted on purpose after its
records were acknowledged (a positive control for the checker).

Errors are handled as Kafka's documentation says: a retriable one repeats the call; an
abortable one aborts the transaction and rewinds the consumer to the group's committed
offsets; a fatal one (the producer fenced among them) closes the producer and starts a new
one with the same transactional id (its InitProducerId fences the old epoch and aborts what
it left open), then rewinds.

A worker whose client call never returns (librdkafka's send_offsets_to_transaction can
hang after a broker failover, its issues 5456 and 5511) is `abandon`ed and replaced, as an
application's supervisor would replace it: it leaves the group at once, the replacement
gets the same transactional id (fencing the hung producer), and the abandoned worker stops
at its next step if its call ever returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

import attrs

from gregor_testing.checker import Ledger, tagged

log = logging.getLogger(__name__)

T = TypeVar("T")


@attrs.frozen
class PipelineSpec:
    bootstrap: str
    source: str
    sink: str
    group: str
    transactional_id: str
    batch: int = 50
    abort_every: int = 10
    transaction_timeout_ms: int = 20000
    retry_for_s: float = 120.0  # how long a retriable error is retried before giving up


class Pipeline(Protocol):
    """One worker: `run` copies until `stop` is set (or it is abandoned), in the calling
    thread. `calling` is the client call under way, if any, and since when
    (time.monotonic()): one that never returns gets the worker `abandon`ed (from another
    thread) and replaced by a new one of the same spec."""

    spec: PipelineSpec
    calling: tuple[str, float] | None
    abandoned: bool

    def run(self, stop: threading.Event) -> None: ...

    def abandon(self) -> None: ...


PipelineFactory = Callable[[PipelineSpec, Ledger], Pipeline]


class Fatal(Exception):
    """The producer cannot go on: a new one must be made."""


class Abortable(Exception):
    """The transaction must be aborted (then the consumer rewound)."""


class Abandoned(Exception):
    """The worker was replaced: it stops."""


class ConfluentPipeline:
    """confluent-kafka (librdkafka): a transactional Producer and a read_committed Consumer
    subscribed to the source."""

    def __init__(self, spec: PipelineSpec, ledger: Ledger) -> None:
        self.spec = spec
        self.ledger = ledger
        self.incarnation = 0
        self.calling: tuple[str, float] | None = None
        self.abandoned = False
        self._consumer: Any = None

    def abandon(self) -> None:
        """Leave the group now (the hung call does not use the consumer); a replacement
        takes the partitions and the transactional id."""
        self.abandoned = True
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        if self.abandoned:
            raise Abandoned()
        self.incarnation = self.ledger.incarnation(self.spec.transactional_id)
        producer = Producer(
            {
                "bootstrap.servers": self.spec.bootstrap,
                "transactional.id": self.spec.transactional_id,
                "transaction.timeout.ms": self.spec.transaction_timeout_ms,
                "linger.ms": 5,
            }
        )
        self._call("init_transactions", lambda: producer.init_transactions(30))
        return producer

    def _call(self, what: str, operation: Callable[[], T]) -> T:
        """Run a transactional call, repeating it while its error is retriable."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.spec.retry_for_s
        while True:
            try:
                self.calling = (what, time.monotonic())
                return operation()
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():
                    self.ledger.event(f"abortable {error.name()}")
                    raise Abortable(str(error)) from exc
                if error.retriable() and time.monotonic() < deadline:
                    self.ledger.event(f"retriable {error.name()}")
                    time.sleep(0.1)
                    continue
                self.ledger.event(f"fatal {error.name()}")
                raise Fatal(str(error)) from exc
            finally:
                self.calling = None

    def _rewind(self, consumer: Any) -> None:
        """Back to the group's committed offsets (require_stable: after pending ones land)."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException

        assignment = consumer.assignment()
        if not assignment:
            return
        deadline = time.monotonic() + self.spec.retry_for_s
        while True:
            try:
                committed = consumer.committed(assignment, timeout=30)
                break
            except KafkaException as exc:  # the group coordinator moving: ask again
                self.ledger.event(f"committed {exc.args[0].name()}")
                if time.monotonic() > deadline:
                    raise Fatal(str(exc)) from exc
                time.sleep(0.2)
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            try:
                consumer.seek(tp)
            except KafkaException:
                pass  # not fetching it yet: it will start at the committed offset

    def run(self, stop: threading.Event) -> None:
        from confluent_kafka import Consumer, TopicPartition

        spec = self.spec
        consumer = self._consumer = Consumer(
            {
                "bootstrap.servers": spec.bootstrap,
                "group.id": spec.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
            }
        )
        consumer.subscribe([spec.source])
        producer = None
        transactions = 0
        tag = ""
        try:
            while not stop.is_set() and not self.abandoned:
                try:
                    if producer is None:
                        producer = self._producer()
                        self._rewind(consumer)
                    messages = [
                        m for m in consumer.consume(spec.batch, timeout=0.5) if m.error() is None
                    ]
                    if not messages:
                        continue
                    transactions += 1
                    tag = f"{spec.transactional_id}.{self.incarnation}.{transactions}"
                    self._copy(producer, consumer, messages, tag, transactions, TopicPartition)
                except Abortable:
                    if producer is None:
                        continue
                    try:
                        self._call("abort_transaction", partial(producer.abort_transaction, 30))
                        self.ledger.abort(tag)
                        self._rewind(consumer)
                    except (Abortable, Fatal):
                        producer = None
                except Fatal as exc:
                    log.info("%s: a new producer after %s", spec.transactional_id, exc)
                    producer = None
        except Abandoned:
            pass
        except Exception:
            if not self.abandoned:  # an abandoned worker's consumer is closed under it
                raise
        finally:
            if self._consumer is consumer:
                self._consumer = None
                consumer.close()

    def _copy(
        self,
        producer: Any,
        consumer: Any,
        messages: list[Any],
        tag: str,
        number: int,
        topic_partition: Any,
    ) -> None:
        spec = self.spec
        self._call("begin_transaction", producer.begin_transaction)
        acked = [0]

        def delivered(error: Any, _message: Any) -> None:
            if error is None:
                acked[0] += 1

        for m in messages:
            value = tagged(m.value(), tag)
            while True:
                try:
                    producer.produce(
                        spec.sink, value, m.key(), partition=m.partition(), on_delivery=delivered
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
        self.ledger.wrote(tag, len(messages))
        next_offsets: dict[int, int] = {}
        for m in messages:
            next_offsets[m.partition()] = m.offset() + 1
        offsets = [topic_partition(spec.source, p, o) for p, o in next_offsets.items()]
        group = consumer.consumer_group_metadata()
        self._call(
            "send_offsets_to_transaction",
            lambda: producer.send_offsets_to_transaction(offsets, group, 30),
        )
        if spec.abort_every and number % spec.abort_every == 0:
            if producer.flush(30) == 0 and acked[0] == len(messages):
                self._call("abort_transaction", lambda: producer.abort_transaction(30))
                self.ledger.abort(tag, written=True)
                self._rewind(consumer)
                return
            raise Abortable("the records of a transaction to abort were not all acknowledged")
        self._call("commit_transaction", lambda: producer.commit_transaction(30))
        self.ledger.commit(tag)
