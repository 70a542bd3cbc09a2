"""One replication flow `source->target`: its topics, its copier, its offset syncs and its
checkpoints, in one nursery.

The copier reads the mirrored partitions from the source (one consumer, no group) and
produces each record to the same partition of the remote topic (one producer): key, value,
headers and timestamp as they were. A chunk of a partition's records is followed, once
delivered, by its offset syncs (see offset_sync), and only then does it count as copied.
A restart resumes after each partition's last sync, so delivery is at least once: only
what was delivered but not yet synced is sent again. Exactly once needs a transactional
producer on the target (records and syncs in one transaction); `Copier.deliver` is where it
would commit.

Any error (a cluster unreachable past the clients' timeouts, a record the target refuses, a
topic gone) is logged, and the flow starts over from its syncs after a backoff: nothing is
skipped. A change of the mirrored partitions (new topics, more partitions) drains what is
in flight and restarts the copier on the new set.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from itertools import groupby
from operator import attrgetter

import trio

from gregor.client import (
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    TopicPartition,
)
from gregor.client.producer.aio import AsyncRecordFuture
from gregor.mirror.checkpoints import CheckpointTask
from gregor.mirror.config import FlowConfig
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
BACKOFF_MAX = 30.0


class Chunk:
    """Consecutive records of one partition as fetched, and their deliveries."""

    __slots__ = ("futures", "partition", "upstream")

    def __init__(
        self,
        partition: TopicPartition,
        upstream: list[int],
        futures: list[AsyncRecordFuture | KafkaError],
    ) -> None:
        self.partition = partition
        self.upstream = upstream
        self.futures = futures


def boundaries(previous: Sync | None, upstream: list[int], downstream: list[int]) -> list[Sync]:
    """The syncs a delivered chunk needs: its first record unless it follows `previous` (the
    last record copied before it, already synced) straight on, both records around every
    jump, and its last record."""
    first = (upstream[0], downstream[0])
    last = (upstream[-1], downstream[-1])
    count = len(upstream)
    straight_on = previous is not None and first == (previous[0] + 1, previous[1] + 1)
    if last[0] - first[0] == count - 1 and last[1] - first[1] == count - 1:
        return [last] if straight_on else [first, last] if count > 1 else [first]
    syncs = [] if straight_on else [first]
    for i in range(1, count):
        if upstream[i] != upstream[i - 1] + 1 or downstream[i] != downstream[i - 1] + 1:
            before = (upstream[i - 1], downstream[i - 1])
            if not syncs or syncs[-1] != before:
                syncs.append(before)
            syncs.append((upstream[i], downstream[i]))
    if syncs[-1] != last:
        syncs.append(last)
    return syncs


class Copier:
    """Copies the flow's partitions until told to stop (or a change), or fails."""

    def __init__(
        self,
        flow: FlowConfig,
        store: SyncStore,
        partitions: Mapping[TopicPartition, TopicPartition],
    ) -> None:
        self.flow = flow
        self.store = store
        self.partitions = dict(partitions)
        self.stop = trio.Event()
        self.copied = 0  # records, for the log
        self.refused = 0  # records the target refused (each reported)
        self._last: dict[TopicPartition, Sync] = {}  # the last record copied this run

    async def run(self) -> None:
        flow = self.flow
        consumer_config = flow.source.consumer_config()
        consumer_config.setdefault("isolation.level", "read_committed")
        consumer_config.update({"enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer_config.pop("group.id", None)
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
            consumer.assign(list(self.partitions))
            for tp in self.partitions:
                last = self.store.last(tp)
                if last is None:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, last[0] + 1)
            nursery.start_soon(self.deliver, receive, producer, syncs)
            async with send:
                await self.pump(consumer, producer, send)

    async def pump(
        self,
        consumer: AsyncConsumer,
        producer: AsyncProducer,
        send: trio.MemorySendChannel[Chunk],
    ) -> None:
        """Fetch and produce, a partition's run of records at a time, until stopped."""
        partitions = self.partitions
        produce = producer.produce
        while not self.stop.is_set():
            records = await consumer.getmany(timeout=0.5)
            for (topic, partition), run in groupby(records, key=attrgetter("topic", "partition")):
                source = TopicPartition(topic, partition)
                target = partitions[source]
                chunk: list[ConsumerRecord] = list(run)
                futures: list[AsyncRecordFuture | KafkaError] = []
                for r in chunk:
                    try:
                        future = await produce(
                            target.topic, r.value, r.key, target.partition, r.headers, r.timestamp
                        )
                    except REFUSED as exc:  # over max.request.size: refused before sending
                        futures.append(exc)
                    else:
                        futures.append(future)
                await send.send(Chunk(source, [r.offset for r in chunk], futures))

    async def deliver(
        self,
        receive: trio.MemoryReceiveChannel[Chunk],
        producer: AsyncProducer,
        syncs: AsyncProducer,
    ) -> None:
        """Wait for each chunk's records in order, then write and flush its syncs; only
        then is it copied. (With transactions, this is where the commit would go.)"""
        topic = self.flow.offset_syncs_topic
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
                written: list[OffsetSync] = []
                for chunk in chunks:
                    upstream, downstream = await self._delivered(chunk)
                    if not upstream:
                        continue
                    tp = chunk.partition
                    for u, d in boundaries(self._last.get(tp), upstream, downstream):
                        sync = OffsetSync(tp, u, d)
                        await syncs.produce(topic, sync.value(), sync.key(), partition=0)
                        written.append(sync)
                    self._last[tp] = (upstream[-1], downstream[-1])
                    self.copied += len(upstream)
                await syncs.flush()
                self.store.add_all(written)

    async def _delivered(self, chunk: Chunk) -> tuple[list[int], list[int]]:
        """The chunk's source offsets and where they landed, once all are delivered. A record
        the target refuses for itself (too large, invalid) is reported and left out: the
        syncs then bracket the gap, and the rest of the partition goes on. Any other failure
        raises: the flow starts over from its syncs."""
        upstream: list[int] = []
        downstream: list[int] = []
        for offset, future in zip(chunk.upstream, chunk.futures, strict=True):
            try:
                if isinstance(future, KafkaError):
                    raise future
                metadata = future.result() if future.done() else await future
            except REFUSED as exc:
                self.refused += 1
                tp = chunk.partition
                log.error(
                    "%s: record %s-%d at offset %d not copied: the target refused it (%s: %s)",
                    self.flow.name,
                    tp.topic,
                    tp.partition,
                    offset,
                    type(exc).__name__,
                    exc,
                )
                continue
            upstream.append(offset)
            downstream.append(metadata.offset)
        return upstream, downstream


async def keep_running(
    what: str, task: Callable[[], Awaitable[None]], done: Callable[[], bool] = lambda: False
) -> None:
    """Run `task` until it returns with `done()` true; a failure is logged and the task
    started again after a backoff (0.5 s doubling to 30 s; reset after a good while)."""
    attempt = 0
    while True:
        started = time.monotonic()
        try:
            await task()
            if done():
                return
        except Exception as exc:  # reported, and the task starts over
            if done():
                raise
            if time.monotonic() - started > BACKOFF_MAX:
                attempt = 0
            delay = min(BACKOFF_MAX, 0.5 * 2**attempt)
            attempt += 1
            log.error(
                "%s failed (%s: %s); starting over in %.1fs",
                what,
                type(exc).__name__,
                exc,
                delay,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            await trio.sleep(delay)


class Flow:
    """A flow's tasks: topic refresh and config sync, the copier, checkpoints."""

    def __init__(self, flow: FlowConfig) -> None:
        self.flow = flow
        self.store = SyncStore()
        self.copied = 0  # records, by copiers that ended
        self.refused = 0
        self.partitions: dict[TopicPartition, TopicPartition] = {}
        self.copier: Copier | None = None
        self.stopping = False

    async def run(self) -> None:
        """Until cancelled or `shutdown()`: every failure is logged and retried."""
        await keep_running(self.flow.name, self._run_once, lambda: self.stopping)

    def shutdown(self) -> None:
        """Stop after delivering and syncing what is in flight."""
        self.stopping = True
        if self.copier is not None:
            self.copier.stop.set()

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
            await self._load_syncs()
            topics = TopicSync(flow, source_admin, target_admin)
            self.partitions = await topics.refresh()
            changed = trio.Event()
            nursery.start_soon(self._refresh, topics, changed)
            if flow.emit_checkpoints or flow.sync_group_offsets:
                checkpoints = CheckpointTask(flow, self.store, lambda: self.partitions)
                nursery.start_soon(keep_running, f"{flow.name} checkpoints", checkpoints.run)
            nursery.start_soon(self._report)
            while not self.stopping:
                self.copier = copier = Copier(flow, self.store, self.partitions)
                try:
                    async with trio.open_nursery() as copying:
                        copying.start_soon(_stop_on, changed, copier.stop)
                        await copier.run()
                        copying.cancel_scope.cancel()
                finally:
                    self.copied += copier.copied
                    self.refused += copier.refused
                    self.copier = None
                if changed.is_set():
                    changed = trio.Event()
                    nursery.start_soon(self._refresh, topics, changed)
            nursery.cancel_scope.cancel()

    async def _load_syncs(self) -> None:
        """The offset syncs written so far: where each partition resumes."""
        store = SyncStore()
        records = await read_to_end(
            self.flow.offset_syncs_cluster.consumer_config(), self.flow.offset_syncs_topic
        )
        store.add_all(
            OffsetSync.decode(r.key, r.value)
            for r in records
            if r.key is not None and r.value is not None
        )
        self.store.syncs = store.syncs

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
                log.info(
                    "%s: now mirroring %d partitions of %d topics",
                    flow.name,
                    len(partitions),
                    len({tp.topic for tp in partitions}),
                )
                self.partitions = partitions
                changed.set()
                return

    async def _report(self) -> None:
        last, then = 0, time.monotonic()
        while True:
            await trio.sleep(30)
            copier = self.copier
            copied = self.copied + (copier.copied if copier else 0)
            refused = self.refused + (copier.refused if copier else 0)
            now = time.monotonic()
            log.info(
                "%s: %d records copied, %.0f records/s, %d refused by the target",
                self.flow.name,
                copied,
                (copied - last) / (now - then),
                refused,
            )
            last, then = copied, now


async def _stop_on(event: trio.Event, stop: trio.Event) -> None:
    await event.wait()
    stop.set()
