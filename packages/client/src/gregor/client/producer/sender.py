"""The sender: drains ready batches into Produce requests, one per leader, and settles them.

One trio task loops: find the ready leaders, connect to those not connected yet, drain,
and send each leader's request from a task of its own (a connection pipelines up to
max.in.flight requests). Those tasks put their requests on the wire in the order they were
drained (`WireOrder`), so a partition's batches reach its leader in sequence order. After a
drain it looks again at once (more batches of a partition may fly); otherwise it sleeps
until the next linger or backoff expiry, or until an append, a completion or a connection
wakes it.

Each partition of a response settles its batch:
- no error: the batch is delivered at the base offset the broker gives;
- a retriable error (or a lost connection, or no answer within request.timeout.ms): back
  into its queue, in creation order, after retry.backoff.ms (doubling up to
  retry.backoff.max.ms), while attempts stay within `retries` and the batch within
  delivery.timeout.ms; errors that mean stale metadata also refresh it;
- MESSAGE_TOO_LARGE for a batch of several records (without a producer id): it is split in
  two halves, sent in its place;
- anything else: the batch fails with that error, naming the partition and the broker; when
  the broker names invalid records (KIP-467 record errors), each of those fails with its own
  message and the batch's other records with an error saying they were refused with them.
A batch still queued when delivery.timeout.ms has passed since it was created fails with a
timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import trio

from gregor.client.cluster import Cluster
from gregor.client.config import ProducerConfig
from gregor.client.network import Backoff, NetworkClient
from gregor.client.producer.accumulator import Accumulator
from gregor.client.producer.batch import ProducerBatch
from gregor.client.producer.transactions import TransactionManager
from gregor.client.types import TopicPartition
from gregor.client.wakeup import Wakeup
from gregor.protocol.apis.produce import (
    BatchIndexAndErrorMessage,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from gregor.protocol.errors import (
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    NetworkError,
    ProtocolError,
    RequestTimedOutError,
)

log = logging.getLogger(__name__)

MIN_PRODUCE_VERSION = 3  # record batch v2 (magic 2)


def _with_context(error: KafkaError, tp: TopicPartition, where: str) -> KafkaError:
    """The same error class, with a message that says which partition and broker."""
    detail = str(error) if str(error) != error.default_message() else error.error_name()
    return type(error)(f"producing to {tp} on {where}: {detail}")


def _named_record_errors(
    error_class: type[KafkaError],
    record_errors: Sequence[BatchIndexAndErrorMessage],
    message: str | None,
    tp: TopicPartition,
    where: str,
) -> dict[int, KafkaError]:
    """Each named record's error, as the Java client makes them: the broker's message for the
    record (else the partition's); the partition's error class when one record is named (it
    is unambiguous), else INVALID_RECORD."""
    cls = error_class if len(record_errors) == 1 else InvalidRecordError
    named: dict[int, KafkaError] = {}
    for found in record_errors:
        why = found.batch_index_error_message or message or cls.default_message()
        named[found.batch_index] = cls(
            f"producing to {tp} on {where}: record {found.batch_index} of the batch: {why}"
        )
    return named


class WireOrder:
    """Places in line for putting requests on one broker's connection.

    The sender takes a place for each request as it drains the request's batches, so the
    places follow the sequence numbers it stamps; each request's task then waits for its
    place before anything else (AddPartitionsToTxn, the connection, a free in-flight slot).
    The tasks' own order is no guide: trio runs woken tasks in any order, and one may wait
    for its AddPartitionsToTxn while a later one has nothing to wait for. A batch that
    reached the broker before its predecessor would be refused (OUT_OF_ORDER_SEQUENCE_NUMBER)
    and, when that predecessor's success had been seen first, failed for good.
    """

    __slots__ = ("_done", "_moved", "_taken", "_turn")

    def __init__(self) -> None:
        self._taken = 0  # places handed out
        self._turn = 0  # the place whose request goes next
        self._done: set[int] = set()  # places given up out of turn (a task that failed)
        self._moved: trio.Event | None = None

    def take(self) -> int:
        place = self._taken
        self._taken += 1
        return place

    async def wait(self, place: int) -> None:
        while self._turn != place:
            if self._moved is None:
                self._moved = trio.Event()
            await self._moved.wait()

    def release(self, place: int) -> None:
        """The place's request is written (or will never be); a second call is a no-op."""
        if place < self._turn or place in self._done:
            return
        self._done.add(place)
        while self._turn in self._done:
            self._done.remove(self._turn)
            self._turn += 1
        if self._moved is not None:
            self._moved.set()
            self._moved = None


class Sender:
    def __init__(
        self,
        config: ProducerConfig,
        accumulator: Accumulator,
        client: NetworkClient,
        transactions: TransactionManager,
    ) -> None:
        self.config = config
        self.accumulator = accumulator
        self.client = client
        self.transactions = transactions
        self.acks = config.acks
        self.delivery_timeout = config.delivery_timeout_ms / 1000
        self.request_timeout = config.request_timeout_ms / 1000
        self.backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._wakeup = Wakeup()
        self._order: dict[int, WireOrder] = {}  # by broker
        self._running = 0
        self.closing = False
        # Told of each completed batch that has on_delivery callbacks to run.
        self.delivered: Callable[[ProducerBatch], None] | None = None

    def wake(self) -> None:
        """Wake the loop; safe from any thread."""
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Loop until cancelled, or until closing and everything is settled."""
        self._wakeup.bind()
        self.accumulator.wake_sender = self.wake
        self.client.listeners.append(self.wake)
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                delay = await self._run_once(nursery)
                if self.closing and not self._running and self.accumulator.incomplete == 0:
                    return
                await self._sleep(delay)

    async def _sleep(self, delay: float) -> None:
        # Woken during the pass (an append after its look at the queues): look again now.
        if not self._wakeup.is_set():
            await self._wakeup.wait(delay)
        self._wakeup.clear()

    async def _run_once(self, nursery: trio.Nursery) -> float:
        """One pass; returns how long to sleep."""
        accumulator = self.accumulator
        now = time.monotonic()
        for batch in accumulator.expire(now, self.delivery_timeout):
            last = f"; last error: {batch.last_error}" if batch.last_error else ""
            self._fail(
                batch,
                RequestTimedOutError(
                    f"{batch.count} record(s) for {batch.tp} expired after "
                    f"{batch.attempts} attempt(s), {now - batch.created:.1f}s since the batch "
                    f"was created (delivery.timeout.ms){last}"
                ),
            )
        transactions = self.transactions
        if transactions.needs_producer_id:
            try:
                await transactions.init_producer_id()
            except (KafkaError, NetworkError) as exc:
                if transactions.fatal is not None:
                    accumulator.stop(transactions.fatal)
                    self._fail_all(transactions.fatal)
                    return 1.0
                log.warning("no producer id yet: %s", exc)
                return self.backoff.delay(0)
            if transactions.idempotent:
                # The broker orders a partition's batches by sequence: several may fly.
                accumulator.max_in_flight_per_partition = (
                    self.config.max_in_flight_requests_per_connection
                )
        cluster = self.client.cluster
        check = accumulator.ready(cluster, now, self.delivery_timeout)
        if check.unknown_leaders:
            self.client.add_topics(check.unknown_leaders)
            self.client.request_update()
        ready = set()
        for node in check.nodes:
            if self.client.is_ready(node):
                ready.add(node)
            else:
                self.client.initiate_connect(node)
        delay = check.next_check - now
        if ready:
            drained, left = accumulator.drain(cluster, ready, now)
            if left:
                # A drain takes one batch per partition: look again at once, for the next
                # ones that may fly (max.in.flight), as Java's sender polls with no wait.
                delay = 0.0
            if drained and transactions.in_transaction:
                # One AddPartitionsToTxn for every partition about to be written.
                transactions.want_partitions(
                    [b.tp for batches in drained.values() for b in batches]
                )
                transactions.want_partitions(accumulator.queued_partitions())
            for node, batches in drained.items():
                self._stamp_sequences(batches)
                order = self._order.get(node)
                if order is None:
                    order = self._order[node] = WireOrder()
                self._running += 1
                nursery.start_soon(self._send, node, batches, cluster, order, order.take())
        if check.nodes - ready:
            delay = min(delay, 0.1)  # re-check soon: a connection is on its way
        if self.closing and accumulator.has_unsent():
            delay = min(delay, 0.01)
        return max(delay, 0.0)

    def _stamp_sequences(self, batches: Sequence[ProducerBatch]) -> None:
        transactions = self.transactions
        if not transactions.idempotent or transactions.producer_id < 0:
            return
        transactional = transactions.transactional_id is not None
        for batch in batches:
            if batch.base_sequence < 0:
                batch.producer_id = transactions.producer_id
                batch.producer_epoch = transactions.producer_epoch
                batch.base_sequence = transactions.next_sequence(batch.tp, batch.count)
                batch.builder.is_transactional = transactional

    async def _send(
        self,
        node: int,
        batches: list[ProducerBatch],
        cluster: Cluster,
        order: WireOrder,
        place: int,
    ) -> None:
        where = str(cluster.broker(node) or f"broker {node}")
        try:
            await order.wait(place)
            await self._send_request(node, batches, where, lambda: order.release(place))
        except Exception as exc:  # a bug must fail these batches, not the whole producer
            log.exception("sending to %s failed", where)
            error = KafkaError(f"producing to {where} failed: {exc!r}")
            for batch in batches:
                if not batch.done:
                    self._fail_sent(batch, error)
        finally:
            order.release(place)
            self._running -= 1
            # What the answer frees (an in-flight slot of a partition or connection, a batch
            # back for a retry) matters only to queued batches; and closing waits for it.
            if self.closing or self.accumulator.has_unsent():
                self.wake()

    async def _send_request(
        self,
        node: int,
        batches: list[ProducerBatch],
        where: str,
        written: Callable[[], None],
    ) -> None:
        by_partition: dict[TopicPartition, ProducerBatch] = {}
        topics: dict[str, list[PartitionProduceData]] = {}
        for batch in batches:
            batch.attempts += 1
            by_partition[batch.tp] = batch
            topics.setdefault(batch.tp.topic, []).append(
                PartitionProduceData(batch.tp.partition, batch.seal())
            )
        request = ProduceRequest(
            transactional_id=self.transactions.transactional_id,
            acks=self.acks,
            timeout_ms=self.config.request_timeout_ms,
            topic_data=[TopicProduceData(t, ps) for t, ps in topics.items()],
        )
        try:
            await self.transactions.add_partitions(by_partition)  # (if transactional)
            connection = await self.client.connect(node)
            version = connection.version_for(ProduceRequest, min_version=MIN_PRODUCE_VERSION)
            if self.acks == 0:
                await connection.send(request, version)
                written()
                for batch in batches:
                    self._succeed(batch, -1, -1)
                return
            response = await self.client.send(
                connection, request, version, timeout=self.request_timeout, written=written
            )
        except (NetworkError, RequestTimedOutError) as exc:
            self.client.request_update()
            for batch in batches:
                self._retry_or_fail(batch, _with_context(exc, batch.tp, where))
            return
        except (KafkaError, ProtocolError) as exc:
            error = exc if isinstance(exc, KafkaError) else KafkaError(str(exc))
            for batch in batches:
                self._fail_sent(batch, _with_context(error, batch.tp, where))
            return
        assert isinstance(response, ProduceResponse)
        for topic in response.responses:
            for part in topic.partition_responses:
                settled = by_partition.pop(TopicPartition(topic.name, part.index), None)
                if settled is not None:
                    self._settle(
                        settled,
                        part.error_code,
                        part.base_offset,
                        part.log_append_time_ms,
                        part.error_message,
                        where,
                        part.record_errors,
                    )
        for batch in by_partition.values():  # not in the response at all
            self._retry_or_fail(batch, NetworkError(f"{where} did not answer for {batch.tp}"))

    def _settle(
        self,
        batch: ProducerBatch,
        code: int,
        base_offset: int,
        log_append_time: int,
        message: str | None,
        where: str,
        record_errors: Sequence[BatchIndexAndErrorMessage] = (),
    ) -> None:
        if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            self._succeed(batch, base_offset, log_append_time)
            return
        if (
            code == ErrorCode.MESSAGE_TOO_LARGE
            and batch.count > 1
            and batch.producer_id < 0
            and batch.splittable
        ):
            # Over the topic's max.message.bytes as one batch: send its records in two
            # halves, as the Java client does. (With a producer id the broker numbered this
            # batch's sequences; it fails as sent.)
            log.info("%r is too large for %s: splitting it", batch, where)
            self.accumulator.split(batch)
            self.wake()
            return
        error_class = KafkaError.for_code(code)
        error = error_class(
            f"producing to {batch.tp} on {where}: {error_class.error_name()}"
            + (f": {message}" if message else "")
        )
        if error_class.invalid_metadata:
            self.client.request_update()
        if error_class.retriable or (
            code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            and batch.base_sequence >= 0
            and self.transactions.follows_unresolved(batch.tp, batch.base_sequence)
        ):
            self._retry_or_fail(batch, error)
        elif record_errors:
            named = _named_record_errors(error_class, record_errors, message, batch.tp, where)
            self._fail_sent(batch, error, named)
        else:
            self._fail_sent(batch, error)

    def _retry_or_fail(self, batch: ProducerBatch, error: KafkaError) -> None:
        now = time.monotonic()
        if (
            batch.attempts <= self.config.retries
            and now - batch.created < self.delivery_timeout
            and not self.transactions.fatal
        ):
            log.debug("retrying %r after %s", batch, error)
            batch.last_error = error
            self.accumulator.reenqueue(batch, now + self.backoff.delay(batch.attempts - 1))
            return
        self._fail_sent(batch, error)

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        self.accumulator.sent(batch)
        self._complete(batch, base_offset, log_append_time)

    def _fail(self, batch: ProducerBatch, error: KafkaError) -> None:
        """Fail a batch that is not in flight (expired, aborted)."""
        self._complete(batch, error=error)

    def _fail_sent(
        self,
        batch: ProducerBatch,
        error: KafkaError,
        record_errors: dict[int, KafkaError] | None = None,
    ) -> None:
        self.accumulator.sent(batch)
        self._complete(batch, error=error, record_errors=record_errors)

    def _fail_all(self, error: KafkaError) -> None:
        for batch in self.accumulator.abort_all(error):
            self._complete(batch, error=error)

    def _complete(
        self,
        batch: ProducerBatch,
        base_offset: int = -1,
        log_append_time: int = -1,
        error: KafkaError | None = None,
        record_errors: dict[int, KafkaError] | None = None,
    ) -> None:
        if batch.base_sequence >= 0:
            self.transactions.resolved(batch.tp, batch.base_sequence, batch.count)
        if error is not None:
            self.transactions.batch_failed(error, batch.base_sequence >= 0)
        batch.complete(base_offset, log_append_time, error, record_errors)
        self.accumulator.completed([batch])
        if self.delivered is not None and batch.callbacks:
            self.delivered(batch)
        parent = batch.parent
        if parent is not None:
            parent.unsettled_parts -= 1
            if not parent.unsettled_parts:  # its records' outcomes are those of its parts
                self._complete(parent)
