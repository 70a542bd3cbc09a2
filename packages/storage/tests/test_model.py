"""A model-based test: random sequences of appends, reads, rolls, truncations, high watermark
moves, retention, compaction and reopening (clean and after a crash), each checked against
a plain in-memory model of the log."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from storage_testing import FakeClock, make_batch, read_records

from gregor.protocol.errors import OffsetOutOfRangeError
from gregor.protocol.records import iter_batches
from gregor.storage import FetchIsolation, LogConfig, open_log
from gregor.storage.cleaner import Cleaner, cleanable_range

Row = tuple[int, bytes, bytes | None]  # offset, key, value

CONFIG = LogConfig.from_properties(
    {
        "segment.bytes": "600",
        "index.interval.bytes": "90",
        "cleanup.policy": "compact,delete",
        "file.delete.delay.ms": "0",
        "segment.index.bytes": "120",
    }
)
KEYS = [b"a", b"b", b"c", b"d"]


class LogMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="gregor-model-"))
        self.clock = FakeClock()
        self.log = open_log(self.tmp / "model-0", CONFIG, clock=self.clock)
        self.rows: list[Row] = []
        self.start_offset = 0
        self.leo = 0
        self.hw = 0
        self.checkpoint: int | None = None
        self.counter = 0

    def teardown(self) -> None:
        log = getattr(self, "log", None)
        if log is not None and not log.closed:
            log.close()
        if hasattr(self, "tmp"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- operations ------------------------------------------------------------------------

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4), tombstone=st.booleans())
    def append(self, keys: list[bytes], tombstone: bool) -> None:
        values: list[bytes | None] = []
        for i, _key in enumerate(keys):
            self.counter += 1
            values.append(None if tombstone and i == 0 else b"v%d" % self.counter)
        batch = make_batch(values, keys=list(keys), timestamp=self.clock.now)
        info = self.log.append_as_leader(batch, leader_epoch=0)
        assert (info.first_offset, info.last_offset) == (self.leo, self.leo + len(keys) - 1)
        self.rows.extend(
            (self.leo + i, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))
        )
        self.leo += len(keys)

    @rule(data=st.data(), max_bytes=st.integers(0, 700), min_one=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, min_one: bool) -> None:
        start = data.draw(st.integers(self.start_offset, self.leo))
        info = self.log.read(start, max_bytes, FetchIsolation.LOG_END, min_one_batch=min_one)
        raw = info.records.read()
        assert len(raw) == len(info.records)
        batches = list(iter_batches(raw))
        assert sum(b.header.size for b in batches) == len(raw)  # whole batches only
        if batches and len(raw) > max_bytes:
            assert min_one and len(batches) == 1  # KIP-74: only the first may exceed
        if not batches:
            return
        first, last = batches[0].header, batches[-1].header
        assert first.base_offset <= max(start, first.base_offset) <= first.last_offset + 1
        # A batch holding the log start offset also holds records below it (DeleteRecords
        # moves the start inside a batch): consumers skip those, so does the model.
        got = [
            (r.offset, r.key, r.value) for b in batches for r in b if r.offset >= self.start_offset
        ]
        want = [row for row in self.rows if first.base_offset <= row[0] <= last.last_offset]
        assert got == want

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def move_high_watermark(self, data: st.DataObject) -> None:
        self.hw = data.draw(st.integers(self.start_offset, self.leo))
        assert self.log.update_high_watermark(self.hw) == self.hw

    @precondition(lambda self: self.leo > self.start_offset)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.start_offset, self.leo - 1))
        self.log.truncate_to(target)
        # The whole batch holding `target` goes, so the end may land below it.
        self.leo = self.log.log_end_offset
        assert self.leo <= target
        self.rows = [row for row in self.rows if row[0] < self.leo]
        self.hw = min(self.hw, self.leo)
        self.start_offset = min(self.start_offset, self.leo)

    @precondition(lambda self: self.hw > self.start_offset)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        before = data.draw(st.integers(self.start_offset, self.hw))
        assert self.log.delete_records(before) == before
        self.start_offset = before
        self.rows = [row for row in self.rows if row[0] >= before]
        self.log.delete_old_segments()

    @rule()
    def compact(self) -> None:
        target = cleanable_range(self.log, self.checkpoint, self.clock.now)
        end, _stats = Cleaner().clean(target, self.clock.now)
        if end > target.first_dirty_offset:
            dirty = [row for row in self.rows if target.first_dirty_offset <= row[0] < end]
            latest = {key: offset for offset, key, _value in dirty}
            self.rows = [
                row for row in self.rows if row[0] >= end or row[0] >= latest.get(row[1], -1)
            ]
        self.checkpoint = end

    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        if crash:
            self.log.closed = True  # killed: no snapshot, no trimming
        else:
            self.log.close()
        self.log = open_log(
            self.tmp / "model-0",
            CONFIG,
            clock=self.clock,
            clean_shutdown=not crash,
            recovery_point=0,
            log_start_offset=self.start_offset,
            high_watermark=self.hw,
        )

    # -- what must always hold -------------------------------------------------------------

    @invariant()
    def offsets_agree(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset == self.start_offset
        assert self.log.high_watermark == self.hw

    @rule()
    def everything_reads_back(self) -> None:
        got = [(r.offset, r.key, r.value) for r in read_records(self.log, self.start_offset)]
        assert got == self.rows
        if self.start_offset > 0:
            try:
                self.log.read(self.start_offset - 1, 100)
            except OffsetOutOfRangeError:
                pass
            else:
                raise AssertionError("a read below the log start offset succeeded")


TestLogModel = LogMachine.TestCase
TestLogModel.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
