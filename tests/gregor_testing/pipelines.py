"""Consume-transform-produce pipelines, one per client, behind one small interface, so a
Jepsen-style test runs them all the same way (tests/transactions/test_txn_failover.py):
`ConfluentPipeline` (librdkafka) and `GregorPipeline` (gregor-client's sync clients), on
one loop (`TransactionalPipeline`) that a client plugs into with a few calls.

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
from typing import Any, ClassVar, Protocol, TypeVar

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


Message = tuple[int, int, bytes | None, bytes]  # (partition, offset, key, value)


class TransactionalPipeline:
    """The worker's loop and its error handling; a client's subclass makes the producer
    and consumer and says what its errors mean (`classify`)."""

    def __init__(self, spec: PipelineSpec, ledger: Ledger) -> None:
        self.spec = spec
        self.ledger = ledger
        self.incarnation = 0
        self.calling: tuple[str, float] | None = None
        self.abandoned = False
        self._consumer: Any = None

    # -- the client's part ---------------------------------------------------------------

    # The producer's settings beyond those every client's gets (new_producer).
    producer_extra: ClassVar[dict[str, Any]] = {}

    def client_types(self) -> tuple[Callable[[dict[str, Any]], Any], ...]:
        """The client's (Consumer, Producer) classes, imported when first needed; both take
        Kafka's config names."""
        raise NotImplementedError

    def new_consumer(self) -> Any:
        """A read_committed consumer of the group, subscribed to the source."""
        spec = self.spec
        consumer = self.client_types()[0](
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
        return consumer

    def new_producer(self) -> Any:
        """A transactional producer of the spec's id (init_transactions not called yet)."""
        return self.client_types()[1](
            {
                "bootstrap.servers": self.spec.bootstrap,
                "transactional.id": self.spec.transactional_id,
                "transaction.timeout.ms": self.spec.transaction_timeout_ms,
                "linger.ms": 5,
                **self.producer_extra,
            }
        )

    def classify(self, exc: Exception) -> tuple[str, str] | None:
        """("abortable" | "retriable" | "fatal", the error's name), or None: not the
        client's error (it propagates)."""
        raise NotImplementedError

    def consume(self, consumer: Any) -> list[Message]:
        raise NotImplementedError

    def produce(self, producer: Any, value: bytes, message: Message) -> Callable[[], bool]:
        """Send the copy; returns whether it was acknowledged (once flushed)."""
        raise NotImplementedError

    def init_transactions(self, producer: Any) -> None:
        raise NotImplementedError

    def send_offsets(self, producer: Any, consumer: Any, offsets: dict[int, int]) -> None:
        raise NotImplementedError

    def commit(self, producer: Any) -> None:
        raise NotImplementedError

    def abort(self, producer: Any) -> None:
        raise NotImplementedError

    def flush(self, producer: Any) -> bool:
        """Everything sent and settled."""
        raise NotImplementedError

    def discard(self, producer: Any) -> None:
        """A producer that cannot go on (fatal error): let go of it."""

    def committed(self, consumer: Any) -> dict[int, int] | None:
        """The group's committed offsets of the assigned partitions (-1: none yet), None
        when nothing is assigned; raises the client's error if the coordinator is away."""
        raise NotImplementedError

    def seek(self, consumer: Any, partition: int, offset: int) -> None:
        raise NotImplementedError

    # -- the loop --------------------------------------------------------------------------

    def abandon(self) -> None:
        """Leave the group now (the hung call does not use the consumer); a replacement
        takes the partitions and the transactional id."""
        self.abandoned = True
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def _producer(self) -> Any:
        if self.abandoned:
            raise Abandoned()
        self.incarnation = self.ledger.incarnation(self.spec.transactional_id)
        producer = self.new_producer()
        try:
            self._call("init_transactions", lambda: self.init_transactions(producer))
        except BaseException:
            self.discard(producer)
            raise
        return producer

    def _call(self, what: str, operation: Callable[[], T]) -> T:
        """Run a transactional call, repeating it while its error is retriable."""
        deadline = time.monotonic() + self.spec.retry_for_s
        while True:
            try:
                self.calling = (what, time.monotonic())
                return operation()
            except Exception as exc:
                kind = self.classify(exc)
                if kind is None:
                    raise
                what_kind, name = kind
                if what_kind == "abortable":
                    self.ledger.event(f"abortable {name}")
                    raise Abortable(str(exc)) from exc
                if what_kind == "retriable" and time.monotonic() < deadline:
                    self.ledger.event(f"retriable {name}")
                    time.sleep(0.1)
                    continue
                self.ledger.event(f"fatal {name}")
                raise Fatal(str(exc)) from exc
            finally:
                self.calling = None

    def _rewind(self, consumer: Any) -> None:
        """Back to the group's committed offsets (require_stable: after pending ones land)."""
        deadline = time.monotonic() + self.spec.retry_for_s
        while True:
            try:
                committed = self.committed(consumer)
                break
            except Exception as exc:  # the group coordinator moving: ask again
                kind = self.classify(exc)
                if kind is None:
                    raise
                self.ledger.event(f"committed {kind[1]}")
                if time.monotonic() > deadline:
                    raise Fatal(str(exc)) from exc
                time.sleep(0.2)
        for partition, offset in (committed or {}).items():
            self.seek(consumer, partition, offset)

    def run(self, stop: threading.Event) -> None:
        consumer = self._consumer = self.new_consumer()
        producer = None
        transactions = 0
        tag = ""
        try:
            while not stop.is_set() and not self.abandoned:
                try:
                    if producer is None:
                        producer = self._producer()
                        self._rewind(consumer)
                    messages = self.consume(consumer)
                    if not messages:
                        continue
                    transactions += 1
                    tag = f"{self.spec.transactional_id}.{self.incarnation}.{transactions}"
                    self._copy(producer, consumer, messages, tag, transactions)
                except Abortable:
                    if producer is None:
                        continue
                    try:
                        self._call("abort_transaction", partial(self.abort, producer))
                        self.ledger.abort(tag)
                        self._rewind(consumer)
                    except (Abortable, Fatal):
                        self.discard(producer)
                        producer = None
                except Fatal as exc:
                    log.info("%s: a new producer after %s", self.spec.transactional_id, exc)
                    if producer is not None:
                        self.discard(producer)
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
        self, producer: Any, consumer: Any, messages: list[Message], tag: str, number: int
    ) -> None:
        spec = self.spec
        self._call("begin_transaction", producer.begin_transaction)
        acks = [self.produce(producer, tagged(m[3], tag), m) for m in messages]
        self.ledger.wrote(tag, len(messages))
        next_offsets = {partition: offset + 1 for partition, offset, _, _ in messages}
        self._call(
            "send_offsets_to_transaction",
            lambda: self.send_offsets(producer, consumer, next_offsets),
        )
        if spec.abort_every and number % spec.abort_every == 0:
            # Flushed first: an abort drops what is not sent yet, and read_uncommitted
            # must show these records (the checker's positive control).
            if self.flush(producer) and all(acked() for acked in acks):
                self._call("abort_transaction", lambda: self.abort(producer))
                self.ledger.abort(tag, written=True)
                self._rewind(consumer)
                return
            raise Abortable("the records of a transaction to abort were not all acknowledged")
        self._call("commit_transaction", lambda: self.commit(producer))
        self.ledger.commit(tag)


class ConfluentPipeline(TransactionalPipeline):
    """confluent-kafka (librdkafka): a transactional Producer and a read_committed Consumer
    subscribed to the source."""

    def client_types(self) -> tuple[Callable[[dict[str, Any]], Any], ...]:
        from confluent_kafka import Consumer, Producer

        return Consumer, Producer

    def classify(self, exc: Exception) -> tuple[str, str] | None:
        from confluent_kafka import KafkaException

        if not isinstance(exc, KafkaException):
            return None
        error = exc.args[0]
        if error.txn_requires_abort():
            return "abortable", error.name()
        return ("retriable" if error.retriable() else "fatal"), error.name()

    def consume(self, consumer: Any) -> list[Message]:
        return [
            (m.partition(), m.offset(), m.key(), m.value())
            for m in consumer.consume(self.spec.batch, timeout=0.5)
            if m.error() is None
        ]

    def produce(self, producer: Any, value: bytes, message: Message) -> Callable[[], bool]:
        acked = [False]

        def delivered(error: Any, _message: Any) -> None:
            acked[0] = error is None

        partition, _, key, _ = message
        while True:
            try:
                producer.produce(
                    self.spec.sink, value, key, partition=partition, on_delivery=delivered
                )
                return lambda: acked[0]
            except BufferError:
                producer.poll(0.1)

    def init_transactions(self, producer: Any) -> None:
        producer.init_transactions(30)

    def send_offsets(self, producer: Any, consumer: Any, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        wanted = [TopicPartition(self.spec.source, p, o) for p, o in offsets.items()]
        producer.send_offsets_to_transaction(wanted, consumer.consumer_group_metadata(), 30)

    def commit(self, producer: Any) -> None:
        producer.commit_transaction(30)

    def abort(self, producer: Any) -> None:
        producer.abort_transaction(30)

    def flush(self, producer: Any) -> bool:
        return bool(producer.flush(30) == 0)

    def committed(self, consumer: Any) -> dict[int, int] | None:
        from confluent_kafka import OFFSET_BEGINNING

        assignment = consumer.assignment()
        if not assignment:
            return None
        found = consumer.committed(assignment, timeout=30)
        return {tp.partition: tp.offset if tp.offset >= 0 else OFFSET_BEGINNING for tp in found}

    def seek(self, consumer: Any, partition: int, offset: int) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            consumer.seek(TopicPartition(self.spec.source, partition, offset))
        except KafkaException:
            pass  # not fetching it yet: it will start at the committed offset


class GregorPipeline(TransactionalPipeline):
    """gregor-client's sync Producer (transactional) and Consumer (read_committed)."""

    producer_extra: ClassVar[dict[str, Any]] = {"max.block.ms": 30_000}

    def client_types(self) -> tuple[Callable[[dict[str, Any]], Any], ...]:
        from gregor.client import Consumer, Producer

        return Consumer, Producer

    def classify(self, exc: Exception) -> tuple[str, str] | None:
        from gregor.protocol.errors import KafkaError, NetworkError, TransactionAbortableError

        if isinstance(exc, TransactionAbortableError):
            return "abortable", type(exc).__name__
        if isinstance(exc, KafkaError):
            return ("retriable" if exc.retriable else "fatal"), type(exc).__name__
        if isinstance(exc, NetworkError):
            return "retriable", type(exc).__name__
        return None

    def consume(self, consumer: Any) -> list[Message]:
        return [
            (r.partition, r.offset, r.key, r.value)
            for r in consumer.consume(self.spec.batch, timeout=0.5)
        ]

    def produce(self, producer: Any, value: bytes, message: Message) -> Callable[[], bool]:
        partition, _, key, _ = message
        future = producer.produce(self.spec.sink, value, key, partition=partition)
        return lambda: future.done() and future.exception() is None

    def init_transactions(self, producer: Any) -> None:
        producer.init_transactions()

    def send_offsets(self, producer: Any, consumer: Any, offsets: dict[int, int]) -> None:
        from gregor.client import TopicPartition

        wanted = {TopicPartition(self.spec.source, p): o for p, o in offsets.items()}
        producer.send_offsets_to_transaction(wanted, consumer.group_metadata())

    def commit(self, producer: Any) -> None:
        producer.commit_transaction()

    def abort(self, producer: Any) -> None:
        producer.abort_transaction()

    def flush(self, producer: Any) -> bool:
        return bool(producer.flush(30) == 0)

    def discard(self, producer: Any) -> None:
        producer.close(0)  # its I/O thread stops; what it still held fails

    def committed(self, consumer: Any) -> dict[int, int] | None:
        assignment = consumer.assignment()
        if not assignment:
            return None
        found = consumer.committed(assignment, 30)
        return {tp.partition: (m.offset if m is not None else -1) for tp, m in found.items()}

    def seek(self, consumer: Any, partition: int, offset: int) -> None:
        from gregor.client import TopicPartition

        tp = TopicPartition(self.spec.source, partition)
        if offset >= 0:
            consumer.seek(tp, offset)
        else:
            consumer.seek_to_beginning(tp)
