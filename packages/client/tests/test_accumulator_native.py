"""The C twins of Accumulator.append and ProducerCore.append_record (`_accumulate.c`)
against the references: the same calls give the same futures, batches, bytes and
bookkeeping, and every case they do not take (a new batch, a full one, headers, a full
buffer, a stopped producer, a key to hash, a serializer, an unknown topic) is the
reference's."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from client_scripted import wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.client.cluster import Cluster, PartitionInfo, TopicInfo
from gregor.client.config import ProducerConfig
from gregor.client.partitioner import StickyPartitions
from gregor.client.producer import accumulator as accumulator_module
from gregor.client.producer.accumulator import Accumulator
from gregor.client.producer.batch import RecordFuture
from gregor.client.producer.core import NeedMetadata, ProducerCore
from gregor.client.types import TopicPartition
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import Compression

native = accumulator_module._native_append
pytestmark = pytest.mark.skipif(native is None, reason="the C extension was not built")


def in_frame(thread: threading.Thread, function: Callable[..., object]) -> bool:
    """Whether `thread` is running `function` (or a C function it called) right now."""
    frame = sys._current_frames().get(thread.ident or -1)
    return frame is not None and frame.f_code is function.__code__


TOPIC = "t"
INFO = TopicInfo(TOPIC, tuple(PartitionInfo(TOPIC, p, leader=1) for p in range(4)))


def make(seed: int = 7, batch_size: int = 1_000, buffer_memory: int = 6_000) -> Accumulator:
    return Accumulator(
        batch_size=batch_size,
        linger_ms=5,
        buffer_memory=buffer_memory,
        compression=Compression.NONE,
        max_request_size=1 << 20,
        sticky=StickyPartitions(batch_size, adaptive=False, rng=random.Random(seed)),
    )


def delivered(error: KafkaError | None, metadata: object) -> None:
    """A delivery callback (never called here: only recorded)."""


fields = st.one_of(st.none(), st.binary(max_size=60))
appends = st.tuples(
    st.one_of(st.none(), st.integers(0, 3)),  # partition (None: sticky)
    fields,  # key
    st.one_of(fields, fields, fields, st.just("text")),  # value (str: the encoder's error)
    st.sampled_from([(), (), (), [("h", b"x")]]),  # headers
    st.integers(0, 2**42),  # timestamp
    st.sampled_from([None, delivered]),
)


def outcome(call: Any, args: tuple[Any, ...]) -> object:
    try:
        future = call(TOPIC, args[0], INFO, *args[1:])
    except Exception as exc:
        return type(exc)
    if future is None:
        return None
    assert type(future) is RecordFuture
    batch, index, timestamp = future
    return (batch.tp, batch.order, index, timestamp)


def snapshot(acc: Accumulator) -> object:
    queues = {
        tp: [(b.order, b.count, b.size, b.is_open, b.builder.build(), b.callbacks) for b in queue]
        for tp, queue in acc._queues.items()
    }
    sticky = {t: (c.partition, c.produced) for t, c in acc._sticky_current.items()}
    return queues, sticky, acc.memory_used, acc.incomplete


def send_first(acc: Accumulator, partition: int) -> None:
    """What the sender does to a partition's first batch: take it (closed) and complete it."""
    queue = acc._queues.get(TopicPartition(TOPIC, partition))
    if queue:
        batch = queue.popleft()
        batch.is_open = False
        acc.completed([batch])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(appends, st.tuples(st.just("send"), st.integers(0, 3))), min_size=20, max_size=80
    ),
    st.integers(0, 2**32),
)
def test_the_c_twin_does_what_the_reference_does(calls: list[tuple[Any, ...]], seed: int) -> None:
    reference, twin = make(seed), make(seed)
    twin_append = twin.appender()
    assert twin_append is not twin.append
    for args in calls:
        if args[0] == "send":
            send_first(reference, args[1])
            send_first(twin, args[1])
        else:
            assert outcome(twin_append, args) == outcome(reference.append, args)
    assert snapshot(twin) == snapshot(reference)


def test_it_takes_the_common_record_itself() -> None:
    """After the first record of a batch, the rest go through C: no call of the reference."""
    acc = make(buffer_memory=1 << 20, batch_size=1 << 16)
    append = acc.appender()
    calls = 0
    real = Accumulator.append

    def counting(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args)

    first = append(TOPIC, 2, INFO, None, b"v", (), 1, None)
    assert first is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(accumulator_module.Accumulator, "append", counting)
        futures = [append(TOPIC, 2, INFO, b"k", b"v", (), 1, delivered) for _ in range(50)]
    assert calls == 0
    assert [f[1] for f in futures if f] == list(range(1, 51))
    batch = first[0]
    assert batch.count == 51 and batch.callbacks == [(i, 1, delivered) for i in range(1, 51)]
    assert acc.memory_used == batch.size == 51 * 22 + 50


def test_a_drained_batch_is_not_appended_to() -> None:
    acc = make(buffer_memory=1 << 20, batch_size=1 << 16)
    append = acc.appender()
    first = append(TOPIC, 0, INFO, None, b"a", (), 1, None)
    assert first is not None
    first[0].is_open = False  # as drain() leaves it
    second = append(TOPIC, 0, INFO, None, b"b", (), 1, None)
    assert second is not None and second[0] is not first[0] and second[1] == 0


def test_a_stopped_accumulator_raises_and_a_full_one_says_none() -> None:
    acc = make(buffer_memory=200, batch_size=1 << 16)
    append = acc.appender()
    assert append(TOPIC, 0, INFO, None, b"v" * 100, (), 1, None) is not None
    assert append(TOPIC, 0, INFO, None, b"v" * 100, (), 1, None) is None  # no room
    acc.stop(KafkaError("closed"))
    with pytest.raises(KafkaError, match="closed"):
        append(TOPIC, 0, INFO, None, b"v", (), 1, None)


def test_it_waits_for_the_lock_like_the_reference() -> None:
    acc = make(buffer_memory=1 << 20, batch_size=1 << 16)
    append = acc.appender()
    assert append(TOPIC, 0, INFO, None, b"v", (), 1, None) is not None
    appended = threading.Event()

    def produce() -> None:
        append(TOPIC, 0, INFO, None, b"v", (), 1, None)
        appended.set()

    with acc.lock:  # the sender, in the middle of a drain
        thread = threading.Thread(target=produce)
        thread.start()
        # Once the thread is in the C call (its Python frame is `produce`, at the call), an
        # append that did not wait for the lock would finish in microseconds.
        wait_for(lambda: in_frame(thread, produce), 10, "the thread to call append")
        assert not appended.wait(0.3)
        count = acc._queues[TopicPartition(TOPIC, 0)][0].count
        assert count == 1
    assert appended.wait(10)
    thread.join(10)
    assert acc._queues[TopicPartition(TOPIC, 0)][0].count == 2


def test_it_checks_its_arguments() -> None:
    assert native is not None
    with pytest.raises(TypeError, match="append"):
        native(object(), TOPIC, 0, INFO, None, b"v", (), 1, None)
    with pytest.raises(TypeError, match="append"):
        native(make(), TOPIC)


def make_core(seed: int, **config: Any) -> ProducerCore:
    core = ProducerCore(
        ProducerConfig.from_dict(
            {"bootstrap.servers": "127.0.0.1:9", "batch.size": 1_000, **config}
        )
    )
    core.client.cluster = Cluster(topics={TOPIC: INFO})
    core.accumulator.sticky._rng = random.Random(seed)
    return core


records = st.tuples(
    st.sampled_from([TOPIC, TOPIC, TOPIC, "unknown"]),
    st.one_of(fields, fields, fields, st.just("text")),  # value
    st.one_of(st.none(), st.none(), fields),  # key
    st.one_of(st.none(), st.none(), st.integers(-1, 4)),  # partition (4: out of range)
    st.sampled_from([None, None, None, [], [("h", b"x")]]),  # headers
    st.integers(0, 2**42),  # timestamp
    st.sampled_from([None, delivered]),
)


def core_outcome(call: Any, args: tuple[Any, ...]) -> object:
    try:
        future = call(*args)
    except (Exception, NeedMetadata) as exc:
        return type(exc)
    assert type(future) is RecordFuture
    batch, index, timestamp = future
    return (batch.tp, batch.order, index, timestamp)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(records, min_size=10, max_size=60),
    st.integers(0, 2**32),
    st.sampled_from([{}, {}, {"key.serializer": "str"}, {"partitioner": "murmur2"}]),
)
def test_the_c_append_record_does_what_the_reference_does(
    calls: list[tuple[Any, ...]], seed: int, config: dict[str, str]
) -> None:
    reference, twin = make_core(seed, **config), make_core(seed, **config)
    assert twin.record_appender is not twin.append_record
    for args in calls:
        assert core_outcome(twin.record_appender, args) == core_outcome(
            reference.append_record, args
        )
    assert snapshot(twin.accumulator) == snapshot(reference.accumulator)


def test_the_c_append_record_stamps_the_time_as_the_reference() -> None:
    core = make_core(1)
    before = time.time_ns() // 1_000_000
    future = core.record_appender(TOPIC, b"v", None, None, None, None, None)
    after = time.time_ns() // 1_000_000
    assert future is not None and before <= future[2] <= after
