"""One replication flow `source->target`: its topics, its copier, its offset syncs and its
checkpoints, in one nursery.

The copier reads the mirrored partitions from the source (one consumer, no group) and
writes them to the same partition of the remote topic (one producer). Fetched record
batches pass through as bytes, still compressed: the target broker assigns their offsets,
and a batch's records keep their offset deltas, so a batch maps its source base offset to
its target base offset. A batch that cannot pass (a compacted one with offset gaps, one
begun before the resume point, log-append-time timestamps, one the target refused) has its
records produced one by one: key, value, headers and timestamp as they were. A chunk of a
partition's batches is followed, once delivered, by its offset syncs (see offset_sync),
and only then does it count as copied. A restart resumes after each partition's last sync,
so delivery is at least once: only what was delivered but not yet synced is sent again.

Exactly once (`exactly.once.support`) keeps the same syncs, on the target, and writes them
in the transaction of the records they cover: one transactional producer on the target
copies what a few polls fetched, waits for it, writes its syncs, and commits. The syncs are
the source offsets' store (KIP-656 keeps them in a store on the target written in the same
transaction; here the syncs already say how far each partition got). A restart fences the
previous incarnation (init_transactions with the flow's transactional.id, which aborts its
open transaction), then reads the syncs with read_committed and resumes after them.

Any error (a cluster unreachable past the clients' timeouts, a record the target refuses, a
topic gone) is logged, and the flow starts over from its syncs after a backoff: nothing is
skipped. A change of the mirrored partitions (new topics, more partitions) drains what is
in flight and restarts the copier on the new set.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from itertools import groupby
from operator import attrgetter
from typing import NamedTuple

import trio

from gregor.client import (
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    AsyncRecordFuture,
    FetchedBatch,
    TimestampType,
    TopicPartition,
)
from gregor.mirror.acls import AclSync
from gregor.mirror.checkpoints import CheckpointTask
from gregor.mirror.config import FlowConfig
from gregor.mirror.metrics import FlowMetrics, now_ms
from gregor.mirror.offset_sync import OffsetSync, Sync, SyncStore
from gregor.mirror.topics import COMPACTED, TopicSync, ensure_topic, read_to_end
from gregor.protocol.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    MessageTooLargeError,
    RecordListTooLargeError,
)

log = logging.getLogger("gregor.mirror")

# Errors about one record, not the flow: the record is reported and left out.
REFUSED = (MessageTooLargeError, RecordListTooLargeError, InvalidRecordError, InvalidTimestampError)
IN_FLIGHT_CHUNKS = 64  # chunks produced and not yet synced, per flow
TRANSACTION_SPAN = 0.2  # seconds of polls copied in one transaction, at most
BACKOFF_MAX = 30.0
REPORT_INTERVAL = 30.0


class Piece(NamedTuple):
    """Records at consecutive source offsets sent as one: a fetched batch passed through
    as it is (`size` its bytes), or one record (`size` 0)."""

    upstream: int  # the source offset of its first record
    records: int
    outcome: AsyncRecordFuture | KafkaError  # delivery of its first record
    size: int  # bytes (of the batch as fetched, or the record's key and value)
    timestamp: int  # of its newest record
    passed: bool  # a batch passed through


class Chunk:
    """Consecutive pieces of one partition as fetched."""

    __slots__ = ("partition", "pieces")

    def __init__(self, partition: TopicPartition, pieces: list[Piece]) -> None:
        self.partition = partition
        self.pieces = pieces


# A run of records copied to consecutive offsets: (source offset, target offset, count).
Run = tuple[int, int, int]


def boundaries(previous: Sync | None, runs: list[Run]) -> list[Sync]:
    """The syncs a delivered chunk needs: its first record unless it follows `previous` (the
    last record copied before it, already synced) straight on, both records around every
    jump, and its last record."""
    merged: list[list[int]] = []
    for u, d, n in runs:
        if merged and u == merged[-1][0] + merged[-1][2] and d == merged[-1][1] + merged[-1][2]:
            merged[-1][2] += n
        else:
            merged.append([u, d, n])
    syncs: list[Sync] = []
    u, d, _ = merged[0]
    if previous is None or (u, d) != (previous[0] + 1, previous[1] + 1):
        syncs.append((u, d))
    for i, (u, d, n) in enumerate(merged):
        if i:
            syncs.append((u, d))
        last = (u + n - 1, d + n - 1)
        if not syncs or syncs[-1] != last:
            syncs.append(last)
    return syncs


class BatchRefused(Exception):
    """The target refused a batch passed through: the flow starts over from its syncs, and
    that batch's records then go one by one (so a refused record is isolated)."""


class RecordRefused(Exception):
    """Exactly once: the target refused a record, which dooms its transaction. The flow
    starts over from its syncs, and leaves that record out (it was reported)."""


def transactional_id(flow: FlowConfig) -> str:
    """The flow's transactional.id on the target: the same for every incarnation of the
    flow, so that a restarted (or a second) mirror fences the one before."""
    return f"gregor-mirror-{flow.name}"


class Copier:
    """Copies the flow's partitions until told to stop (or a change), or fails.

    Fetched batches pass through as bytes (`produce_batch`) when they can: whole, with
    dense offsets, create-time timestamps, and not too large for the target (as far as
    its refusals told). Otherwise their records are produced one by one.
    """

    def __init__(
        self,
        flow: FlowConfig,
        store: SyncStore,
        partitions: Mapping[TopicPartition, TopicPartition],
        one_by_one: OneByOne | None = None,
        metrics: FlowMetrics | None = None,
    ) -> None:
        self.flow = flow
        self.store = store
        self.partitions = dict(partitions)
        self.one_by_one = one_by_one or OneByOne()
        self.metrics = metrics or FlowMetrics(flow.name)
        self.stop = trio.Event()
        self.refused = 0  # records the target refused (each reported)
        self._last: dict[TopicPartition, Sync] = {}  # the last record copied this run

    async def run(self) -> None:
        flow = self.flow
        consumer_config = flow.source.consumer_config()
        consumer_config.setdefault("isolation.level", "read_committed")
        # Reading a source topic deleted meanwhile must not create it again there.
        consumer_config.setdefault("allow.auto.create.topics", False)
        consumer_config.update({"enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer_config.pop("group.id", None)
        if flow.exactly_once:
            await self._run_transactional(consumer_config)
            return
        # Not idempotent unless asked: a batch with a producer id cannot be split, so one
        # record over the target's max.message.bytes would take its whole batch with it.
        # Delivery is at least once either way, and the syncs bracket a retry's duplicates.
        producer_config = flow.target.producer_config(acks="all")
        producer_config.setdefault("enable.idempotence", False)
        send, receive = trio.open_memory_channel[Chunk](IN_FLIGHT_CHUNKS)
        async with (
            AsyncConsumer(consumer_config) as consumer,
            AsyncProducer(producer_config) as producer,
            AsyncProducer(flow.offset_syncs_cluster.producer_config(acks="all")) as syncs,
            trio.open_nursery() as nursery,
        ):
            self._resume(consumer)
            nursery.start_soon(self.deliver, receive, producer, syncs)
            async with send:
                await self.pump(consumer, producer, send)

    def _resume(self, consumer: AsyncConsumer) -> None:
        """Assign the partitions, each from the record after its last sync."""
        consumer.assign(list(self.partitions))
        for tp in self.partitions:
            last = self.store.last(tp)
            if last is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, last[0] + 1)

    async def _run_transactional(self, consumer_config: dict[str, object]) -> None:
        """Exactly once: records and their syncs in one transaction at a time."""
        flow = self.flow
        producer_config = flow.target.producer_config(acks="all")
        producer_config.setdefault("transactional.id", transactional_id(flow))
        async with (
            AsyncConsumer(consumer_config) as consumer,
            AsyncProducer(producer_config) as producer,
        ):
            await producer.init_transactions()  # the previous incarnation's transaction ends
            await load_syncs(flow, self.store)
            self._resume(consumer)
            while not self.stop.is_set():
                batches = await consumer.getmany_batches(timeout=0.5)
                if batches:
                    await self._transaction(consumer, producer, batches)

    async def _transaction(
        self, consumer: AsyncConsumer, producer: AsyncProducer, batches: list[FetchedBatch]
    ) -> None:
        """Copy `batches` and what else is fetched within TRANSACTION_SPAN, then write the
        syncs of what landed and commit it all."""
        producer.begin_transaction()
        end = trio.current_time() + TRANSACTION_SPAN
        chunks: list[Chunk] = []
        while batches:
            chunks += await self._produce(producer, batches)
            if trio.current_time() >= end or self.stop.is_set():
                break
            batches = await consumer.getmany_batches(timeout=0)
        await producer.flush()
        written, _ = await self._write_syncs(chunks, producer)
        await producer.commit_transaction()  # (fails if a sync was not written)
        self.store.add_all(written)

    async def pump(
        self,
        consumer: AsyncConsumer,
        producer: AsyncProducer,
        send: trio.MemorySendChannel[Chunk],
    ) -> None:
        """Fetch and produce, a partition's run of batches at a time, until stopped."""
        while not self.stop.is_set():
            batches = await consumer.getmany_batches(timeout=0.5)
            for chunk in await self._produce(producer, batches):
                await send.send(chunk)

    async def _produce(self, producer: AsyncProducer, batches: list[FetchedBatch]) -> list[Chunk]:
        """Produce fetched batches to their target partitions: a chunk per partition's run."""
        partitions = self.partitions
        read = self.metrics.read
        now = now_ms()
        chunks: list[Chunk] = []
        for source, run in groupby(batches, key=attrgetter("topic_partition")):
            target = partitions[source]
            pieces: list[Piece] = []
            for batch in run:
                timestamp = batch.header.max_timestamp
                read(source, timestamp, now, batch.high_watermark - batch.last_offset - 1)
                if self.one_by_one.passes(source, target, batch):
                    data = batch.data
                    try:
                        future = await producer.produce_batch(target.topic, target.partition, data)
                    except REFUSED:  # over max.request.size: refused before sending
                        pass
                    else:
                        pieces.append(
                            Piece(
                                batch.base_offset,
                                batch.records_count,
                                future,
                                len(data),
                                timestamp,
                                True,
                            )
                        )
                        continue
                await self._produce_records(producer, source, target, batch, pieces)
            chunks.append(Chunk(source, pieces))
        return chunks

    async def _produce_records(
        self,
        producer: AsyncProducer,
        source: TopicPartition,
        target: TopicPartition,
        batch: FetchedBatch,
        pieces: list[Piece],
    ) -> None:
        produce = producer.produce
        left_out = self.one_by_one.left_out
        for r in batch.records():
            if left_out and (source, r.offset) in left_out:
                continue  # refused by the target before (exactly once), and reported
            outcome: AsyncRecordFuture | KafkaError
            try:
                outcome = await produce(
                    target.topic, r.value, r.key, target.partition, r.headers, r.timestamp
                )
            except REFUSED as exc:  # over max.request.size: refused before sending
                outcome = exc
            size = (len(r.key) if r.key else 0) + (len(r.value) if r.value else 0)
            pieces.append(Piece(r.offset, 1, outcome, size, r.timestamp, False))

    async def deliver(
        self,
        receive: trio.MemoryReceiveChannel[Chunk],
        producer: AsyncProducer,
        syncs: AsyncProducer,
    ) -> None:
        """Wait for each chunk's records in order, then write and flush its syncs; only
        then is it copied."""
        async with receive:
            while True:
                try:
                    chunks = [await receive.receive()]
                except trio.EndOfChannel:
                    return
                while True:  # everything already waiting, under one flush
                    try:
                        chunks.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                written, outcomes = await self._write_syncs(chunks, syncs)
                await syncs.flush()
                # A sync not written fails the flow (raised here): left out, a jump would
                # go unbracketed and translation inexact. It starts over from those that were.
                for outcome in outcomes:
                    outcome.result()
                self.store.add_all(written)

    async def _write_syncs(
        self, chunks: list[Chunk], syncs: AsyncProducer
    ) -> tuple[list[OffsetSync], list[AsyncRecordFuture]]:
        """Wait for the chunks' records in order, and produce the syncs of where they
        landed (not flushed): the syncs, and their deliveries."""
        topic = self.flow.offset_syncs_topic
        written: list[OffsetSync] = []
        outcomes: list[AsyncRecordFuture] = []
        for chunk in chunks:
            runs = await self._delivered(chunk)
            if not runs:
                continue
            tp = chunk.partition
            for u, d in boundaries(self._last.get(tp), runs):
                sync = OffsetSync(tp, u, d)
                outcomes.append(await syncs.produce(topic, sync.value(), sync.key(), partition=0))
                written.append(sync)
            u, d, n = runs[-1]
            self._last[tp] = (u + n - 1, d + n - 1)
        return written, outcomes

    async def _delivered(self, chunk: Chunk) -> list[Run]:
        """Where the chunk's records landed, once all are delivered. A record the target
        refuses for itself (too large, invalid) is reported and left out: the syncs then
        bracket the gap, and the rest of the partition goes on. A batch passed through
        that the target refuses raises BatchRefused; any other failure raises too: the
        flow starts over from its syncs."""
        runs: list[Run] = []
        tp = chunk.partition
        delivered = self.metrics.delivered
        for piece in chunk.pieces:
            outcome = piece.outcome
            sent = not isinstance(outcome, KafkaError)
            try:
                if isinstance(outcome, KafkaError):
                    raise outcome
                metadata = outcome.result() if outcome.done() else await outcome
            except REFUSED as exc:
                if piece.passed:
                    self.one_by_one.refused(tp, self.partitions[tp], piece, exc)
                    raise BatchRefused(
                        f"{self.flow.name}: the target refused the batch of {tp.topic}-"
                        f"{tp.partition} at offsets {piece.upstream}.."
                        f"{piece.upstream + piece.records - 1} ({piece.size} bytes; "
                        f"{type(exc).__name__}: {exc}); its records will be sent one by one"
                    ) from exc
                self.refused += 1
                log.error(
                    "%s: record %s-%d at offset %d not copied: the target refused it (%s: %s)",
                    self.flow.name,
                    tp.topic,
                    tp.partition,
                    piece.upstream,
                    type(exc).__name__,
                    exc,
                )
                if sent and self.flow.exactly_once:
                    self.one_by_one.left_out.add((tp, piece.upstream))
                    raise RecordRefused(
                        f"{self.flow.name}: the transaction with record {tp.topic}-"
                        f"{tp.partition}@{piece.upstream} cannot commit; it is copied again "
                        "without that record"
                    ) from exc
                continue
            runs.append((piece.upstream, metadata.offset, piece.records))
            delivered(tp, piece.records, piece.size, piece.timestamp)
        return runs


class OneByOne:
    """Which fetched batches go record by record, as the target's refusals taught: batches
    of a target partition at or over the size of one it refused as too large, and any
    batch it refused for another reason. Kept across copier restarts."""

    def __init__(self) -> None:
        self.too_large: dict[TopicPartition, int] = {}  # target partition: refused size
        self.batches: set[tuple[TopicPartition, int]] = set()  # (source, base offset)
        # Exactly once: records the target refused, left out when copied again.
        self.left_out: set[tuple[TopicPartition, int]] = set()  # (source, offset)

    def passes(self, source: TopicPartition, target: TopicPartition, batch: FetchedBatch) -> bool:
        """Whether the batch goes through as it is."""
        return (
            batch.producible
            and batch.header.timestamp_type is TimestampType.CREATE_TIME
            # A cleaned batch's first timestamp is the source's delete horizon: not the
            # target's to inherit (Apache Kafka's cleaner would act on it).
            and not batch.header.has_delete_horizon
            and len(batch.data) < self.too_large.get(target, _NO_LIMIT)
            and (source, batch.base_offset) not in self.batches
        )

    def refused(
        self, source: TopicPartition, target: TopicPartition, piece: Piece, error: Exception
    ) -> None:
        if isinstance(error, MessageTooLargeError | RecordListTooLargeError):
            self.too_large[target] = min(piece.size, self.too_large.get(target, _NO_LIMIT))
        else:
            self.batches.add((source, piece.upstream))


_NO_LIMIT = 1 << 62


async def keep_running(
    what: str, task: Callable[[], Awaitable[None]], done: Callable[[], bool] = lambda: False
) -> None:
    """Run `task` until it returns with `done()` true; a failure is logged and the task
    started again after a backoff (0.5 s doubling to 30 s; reset after a good while). A
    failure once `done()` is logged too, and ends it."""
    attempt = 0
    while True:
        started = trio.current_time()
        try:
            await task()
            if done():
                return
        except Exception as exc:  # reported, and the task starts over
            if done():
                log.warning("%s stopped with an error (%s)", what, describe(exc))
                return
            if trio.current_time() - started > BACKOFF_MAX:
                attempt = 0
            delay = min(BACKOFF_MAX, 0.5 * 2**attempt)
            attempt += 1
            log.error(
                "%s failed (%s); starting over in %.1fs",
                what,
                describe(exc),
                delay,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            await trio.sleep(delay)


def describe(exc: BaseException) -> str:
    """`Type: message` of the exception, or of each one a nursery's group holds."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


class Flow:
    """A flow's tasks: topic refresh and config sync, the copier, checkpoints, ACL sync."""

    def __init__(self, flow: FlowConfig) -> None:
        self.flow = flow
        self.store = SyncStore()
        self.refused = 0
        self.partitions: dict[TopicPartition, TopicPartition] = {}
        self.copier: Copier | None = None
        self.one_by_one = OneByOne()
        self.metrics = FlowMetrics(
            flow.name, lambda topic: flow.policy.format_remote_topic(flow.source.alias, topic)
        )
        self.stopping = False
        self._scope = trio.CancelScope()

    async def run(self) -> None:
        """Until cancelled or `shutdown()`: every failure is logged and retried."""
        with self._scope:
            await keep_running(self.flow.name, self._run_once, lambda: self.stopping)

    def shutdown(self) -> None:
        """Stop after delivering and syncing what is in flight; at once if nothing is
        (the copier not started: setting up, or waiting to start over)."""
        self.stopping = True
        if self.copier is not None:
            self.copier.stop.set()
        else:
            self._scope.cancel()

    async def _run_once(self) -> None:
        flow = self.flow
        async with (
            AsyncAdminClient(flow.source.admin_config()) as source_admin,
            AsyncAdminClient(flow.target.admin_config()) as target_admin,
            trio.open_nursery() as nursery,
        ):
            syncs_admin = source_admin if flow.offset_syncs_location == "source" else target_admin
            await ensure_topic(
                syncs_admin,
                flow.offset_syncs_topic,
                1,
                flow.offset_syncs_replication_factor,
                COMPACTED,
            )
            if not flow.exactly_once:
                # (Exactly once: the copier reads them after fencing the previous
                # incarnation, whose open transaction would hold up a read_committed read.)
                await load_syncs(flow, self.store)
            topics = TopicSync(flow, source_admin, target_admin)
            self.partitions = await topics.refresh()
            changed = trio.Event()
            nursery.start_soon(self._refresh, topics, changed)
            if flow.emit_checkpoints or flow.sync_group_offsets:
                checkpoints = CheckpointTask(
                    flow, self.store, lambda: self.partitions, self.metrics
                )
                nursery.start_soon(keep_running, f"{flow.name} checkpoints", checkpoints.run)
            if flow.sync_topic_acls:
                acls = AclSync(flow, source_admin, target_admin)
                nursery.start_soon(keep_running, f"{flow.name} topic ACL sync", acls.run)
            nursery.start_soon(self._report)
            while not self.stopping:
                self.copier = copier = Copier(
                    flow, self.store, self.partitions, self.one_by_one, self.metrics
                )
                try:
                    async with trio.open_nursery() as copying:
                        copying.start_soon(_stop_on, changed, copier.stop)
                        await copier.run()
                        copying.cancel_scope.cancel()
                finally:
                    self.refused += copier.refused
                    self.copier = None
                if changed.is_set():
                    changed = trio.Event()
                    nursery.start_soon(self._refresh, topics, changed)
            nursery.cancel_scope.cancel()

    async def _refresh(self, topics: TopicSync, changed: trio.Event) -> None:
        """New topics and partitions every refresh.topics.interval.seconds; topic configs
        every sync.topic.configs.interval.seconds. A new set restarts the copier."""
        flow = self.flow
        next_configs = trio.current_time() if flow.sync_topic_configs else math.inf
        while True:
            wake = min(trio.current_time() + flow.refresh_topics_interval, next_configs)
            await trio.sleep_until(wake)
            if trio.current_time() >= next_configs:
                await topics.sync_configs(sorted({tp.topic for tp in self.partitions}))
                next_configs = trio.current_time() + flow.sync_topic_configs_interval
            partitions = await topics.refresh()
            if partitions != self.partitions:
                before = {tp.topic for tp in self.partitions}
                after = {tp.topic for tp in partitions}
                log.info(
                    "%s: now mirroring %d partitions of %d topics%s%s",
                    flow.name,
                    len(partitions),
                    len(after),
                    f"; new: {', '.join(sorted(after - before))}" if after - before else "",
                    # A source topic deleted (or no longer matching) is said by name.
                    f"; gone: {', '.join(sorted(before - after))}" if before - after else "",
                )
                self.partitions = partitions
                changed.set()
                return

    async def _report(self) -> None:
        """The metrics, every REPORT_INTERVAL seconds: the flow's at INFO, then each
        partition's at DEBUG."""
        while True:
            await trio.sleep(REPORT_INTERVAL)
            copier = self.copier
            refused = self.refused + (copier.refused if copier else 0)
            first, *partitions = self.metrics.report()
            log.info("%s, %d records refused by the target", first, refused)
            for line in partitions:
                log.debug("%s", line)


async def load_syncs(flow: FlowConfig, into: SyncStore) -> None:
    """The offset syncs written so far, committed ones only: where each partition resumes."""
    store = SyncStore()
    config = {**flow.offset_syncs_cluster.consumer_config(), "isolation.level": "read_committed"}
    records = await read_to_end(config, flow.offset_syncs_topic)
    store.add_all(
        OffsetSync.decode(r.key, r.value)
        for r in records
        if r.key is not None and r.value is not None
    )
    into.syncs = store.syncs


async def _stop_on(event: trio.Event, stop: trio.Event) -> None:
    await event.wait()
    stop.set()
