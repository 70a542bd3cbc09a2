"""The fast append (one stamped batch, one pwritev) against the checked path.

Two logs take the same appends, one through `append_as_leader` (fast wherever it applies) and
one through the checked path alone; their results and every byte of their files must agree.
Each test runs with the C twin of `LogSegment.fast_append` (when it was built) and with
the reference.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_testing import FakeClock, LogOpener, make_batch

from gregor.protocol.errors import CorruptRecordError, KafkaStorageError, MessageTooLargeError
from gregor.protocol.native import native_function
from gregor.protocol.records import STAMPED_PREFIX, stamp_produced_batch
from gregor.storage import AppendInfo, AppendOrigin, Log, fast_append
from gregor.storage import log as log_module
from gregor.storage.config import LogConfig
from gregor.storage.epoch_cache import LeaderEpochCache
from gregor.storage.fast_append import Records, SegmentFastAppend
from gregor.storage.files import FileHandle
from gregor.storage.index import OffsetIndex
from gregor.storage.producer_state import ProducerStateManager
from gregor.storage.segment import LogSegment
from gregor.storage.segments import SegmentList

IMPLEMENTATIONS: list[SegmentFastAppend] = [LogSegment.fast_append]
LOG_IMPLEMENTATIONS: list[LogFastAppend] = [Log._fast_append]
if fast_append.segment_fast_append is not LogSegment.fast_append:
    IMPLEMENTATIONS.append(fast_append.segment_fast_append)
    native_log = fast_append.log_fast_append(Log)
    assert native_log is not None
    LOG_IMPLEMENTATIONS.append(native_log)


@pytest.fixture(
    autouse=True,
    params=list(zip(IMPLEMENTATIONS, LOG_IMPLEMENTATIONS, strict=True)),
    ids=["py", "c"][: len(IMPLEMENTATIONS)],
)
def implementation(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> SegmentFastAppend:
    """The log's fast append through each implementation in turn: the references
    (Log._fast_append calling LogSegment.fast_append), or their C twins."""
    function, log_function = request.param
    monkeypatch.setattr(log_module, "_segment_fast_append", function)
    monkeypatch.setattr(log_module, "_fast_append", log_function)
    result: SegmentFastAppend = function
    return result


def test_the_extension_is_used_when_built() -> None:
    native = fast_append._native()
    is_c = fast_append.segment_fast_append is not LogSegment.fast_append
    assert is_c == (native is not None)
    if os.environ.get("GREGOR_NO_EXTENSIONS"):
        assert native is None


def stamp_and_join(batch: bytes, offset: int, epoch: int) -> bytes:
    stamped = stamp_produced_batch(batch, offset, epoch, 1 << 20)
    assert stamped is not None
    return stamped[0] + batch[STAMPED_PREFIX:]


LogFastAppend = Callable[[Log, Records, int], AppendInfo | None]


def checked_append(log: Log, records: bytes, epoch: int) -> AppendInfo:
    return log._append_checked(records, epoch, AppendOrigin.CLIENT)


def log_files(log: Log) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(log.dir.iterdir())}


def test_fast_and_checked_appends_write_the_same_files(
    open_test_log: LogOpener, tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {"segment_bytes": 40_000, "index_interval_bytes": 1000}
    fast = open_test_log(tmp_path / "fast-0", **settings)
    checked = open_test_log(tmp_path / "checked-0", **settings)
    slow_calls = []
    checked_path = Log._append_checked

    def counted(log: Log, records: bytes, epoch: int, origin: AppendOrigin) -> AppendInfo:
        if log is fast:
            slow_calls.append(len(records))
        return checked_path(log, records, epoch, origin)

    monkeypatch.setattr(Log, "_append_checked", counted)
    rng = random.Random(7)
    timestamp = 1_000
    fast_infos, checked_infos = [], []
    for i in range(120):
        count = rng.randrange(1, 8)
        values = [rng.randbytes(rng.randrange(0, 600)) for _ in range(count)]
        # Timestamps mostly grow, sometimes go back; some batches have none (-1).
        timestamp += rng.randrange(-50, 200)
        batch = make_batch(values, timestamp=timestamp if i % 17 != 5 else -1)
        epoch = 1 + i // 40  # a new leader epoch now and then
        fast_infos.append(fast.append_as_leader(batch, epoch))
        checked_infos.append(checked_append(checked, batch, epoch))
        clock.advance(10)
    assert fast_infos == checked_infos
    # The checked path took the first batch of each segment and the ones that rolled.
    assert 0 < len(slow_calls) <= 2 * len(fast.segments)
    assert len(fast.segments) == len(checked.segments) > 2  # it rolled on the way
    starts = [(1, 0), (2, fast_infos[40].first_offset), (3, fast_infos[80].first_offset)]
    assert fast.epoch_cache.entries() == checked.epoch_cache.entries() == starts
    for log in (fast, checked):
        log.close()
    assert log_files(fast) == log_files(checked)


def test_fast_append_leaves_what_it_cannot_take_to_the_checked_path(
    open_test_log: LogOpener,
) -> None:
    log = open_test_log(max_message_bytes=2000)
    log.append_as_leader(make_batch([b"x"]), 0)
    good = make_batch([b"a", b"b"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="stored CRC"):
        log.append_as_leader(bytes(corrupt), 0)
    with pytest.raises(MessageTooLargeError, match=r"\(max\.message\.bytes\)"):
        log.append_as_leader(make_batch([bytes(3000)]), 0)
    # Two batches in one append, and an idempotent producer's batch: the checked path.
    two = log.append_as_leader(good + good, 0)
    assert (two.first_offset, two.last_offset, two.records_count) == (1, 4, 4)
    idempotent = make_batch([b"i"], producer_id=5, producer_epoch=0, base_sequence=0)
    info = log.append_as_leader(idempotent, 0)
    assert (info.first_offset, info.duplicate) == (5, False)
    assert log.append_as_leader(idempotent, 0).duplicate
    assert log.log_end_offset == 6


def test_fast_append_disarms_when_the_offset_index_fills(
    open_test_log: LogOpener, tmp_path: Path
) -> None:
    # Room for four index entries: the fifth needs a roll, as should_roll decides.
    settings = {"segment_index_bytes": 32, "index_interval_bytes": 1}
    fast = open_test_log(tmp_path / "fast-0", **settings)
    checked = open_test_log(tmp_path / "checked-0", **settings)
    batch = make_batch([b"v" * 100])
    for _ in range(20):
        assert fast.append_as_leader(batch, 0) == checked_append(checked, batch, 0)
    assert [s.base_offset for s in fast.segments] == [s.base_offset for s in checked.segments]
    assert len(fast.segments) > 1


def test_stamped_batch_is_what_the_segment_holds(open_test_log: LogOpener) -> None:
    log = open_test_log()
    batch = make_batch([b"a", b"b"])
    log.append_as_leader(batch, 2)
    info = log.append_as_leader(batch, 2)
    data = log.active_segment.log_path.read_bytes()
    assert data[len(batch) :] == stamp_and_join(batch, 2, 2)
    assert (info.first_offset, info.valid_bytes) == (2, len(batch))


def test_write_errors_are_oserrors_with_errno_and_take_the_log_offline(
    open_test_log: LogOpener, implementation: SegmentFastAppend
) -> None:
    log = open_test_log()
    batch = make_batch([b"a"])
    log.append_as_leader(batch, 0)
    segment = log.active_segment
    segment._log = FileHandle(segment.log_path, os.O_RDONLY)  # a descriptor writes fail on
    with pytest.raises(OSError) as raised:
        implementation(segment, batch, 1, 0, 1 << 20, 0)
    assert raised.value.errno == errno.EBADF
    with pytest.raises(KafkaStorageError, match=r"append of .* failed: \[Errno 9\]"):
        log.append_as_leader(batch, 0)
    assert log.offline and segment.size == len(batch)
    assert segment.log_path.read_bytes() == stamp_and_join(batch, 0, 0)


def test_both_implementations_return_and_write_the_same(
    open_test_log: LogOpener, tmp_path: Path
) -> None:
    if len(IMPLEMENTATIONS) == 1:
        pytest.skip("the C extension was not built")
    logs = [open_test_log(tmp_path / f"{i}-0", index_interval_bytes=300) for i in range(2)]
    rng = random.Random(11)
    for i in range(60):
        batch = make_batch(
            [rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.randrange(1, 4))],
            timestamp=1_000 + rng.randrange(-20, 40) * i,
        )
        results = []
        for log, function in zip(logs, IMPLEMENTATIONS, strict=True):
            segment = log.active_segment
            if i == 0:
                results.append(log.append_as_leader(batch, 3))
                continue
            offset = log.log_end_offset
            results.append(function(segment, batch, offset, 3, 1 << 20, 0))
            if results[-1] is not None:
                log._leo = offset + results[-1].records_count
        assert results[0] == results[1]
        assert type(results[0]) is type(results[1])
        fields = (
            "_size",
            "_bytes_since_index",
            "_max_timestamp",
            "_fast_size_limit",
            "_fast_time_indexed",
        )
        a, b = (log.active_segment for log in logs)
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        assert a.offset_index.entries == b.offset_index.entries
    for log in logs:
        log.close()
    assert log_files(logs[0]) == log_files(logs[1])


def test_the_extension_reads_slots_only_of_the_classes_it_was_bound_to(
    open_test_log: LogOpener,
) -> None:
    if len(IMPLEMENTATIONS) == 1:
        pytest.skip("the C extension was not built")
    native = fast_append.segment_fast_append
    log = open_test_log()
    batch = make_batch([b"a"])
    log.append_as_leader(batch, 0)

    class Impostor:  # the same names, no slots: the offsets must not be used on it
        def __init__(self, segment: LogSegment) -> None:
            for name in LogSegment.__slots__[1:]:
                setattr(self, name, getattr(segment, name))

    with pytest.raises(TypeError, match="segment is a Impostor, not a LogSegment"):
        native(Impostor(log.active_segment), batch, 1, 0, 1 << 20, 0)  # type: ignore[arg-type]
    assert log.active_segment.size == len(batch)  # nothing written
    bind = native_function("bind_segment", "gregor.storage._fast_append")
    assert bind is not None
    with pytest.raises(TypeError, match=r"Impostor\._fast_size_limit is not a writable slot"):
        bind(AppendInfo, Impostor, OffsetIndex, FileHandle)
    with pytest.raises(TypeError, match="a tuple subclass"):
        bind(list, LogSegment, OffsetIndex, FileHandle)

    class Slotted(LogSegment):
        __slots__ = ()

    # The offsets are process-wide: one set of classes.
    with pytest.raises(ValueError, match="already bound to LogSegment, not Slotted"):
        bind(AppendInfo, Slotted, OffsetIndex, FileHandle)
    assert bind(AppendInfo, LogSegment, OffsetIndex, FileHandle) is not None


def test_the_log_twin_reads_slots_only_of_a_log(open_test_log: LogOpener) -> None:
    if len(IMPLEMENTATIONS) == 1:
        pytest.skip("the C extension was not built")
    log_twin = fast_append.log_fast_append(Log)
    assert log_twin is not None
    log = open_test_log()
    batch = make_batch([b"a"])
    log.append_as_leader(batch, 0)
    with pytest.raises(TypeError, match="log is a LogSegment, not a Log"):
        log_twin(log.active_segment, batch, 0)  # type: ignore[arg-type]
    info = log_twin(log, batch, 0)
    assert info is not None and (info.first_offset, log.log_end_offset) == (1, 2)
    bind_log = native_function("bind_log", "gregor.storage._fast_append")
    with pytest.raises(TypeError, match=r"OffsetIndex\.config is not a writable slot"):
        bind_log(
            AppendInfo, OffsetIndex, SegmentList, LogConfig, ProducerStateManager, LeaderEpochCache
        )
