"""The leader epoch cache: which leader epoch began at which offset.

Persisted in the partition's `leader-epoch-checkpoint` (`epoch start_offset` lines). A follower
asks the leader for the end offset of its latest epoch (OffsetsForLeaderEpoch) and truncates
to it; the cache answers that question (`end_offset_for`).

Writes replace the file atomically but do not fsync on the caller's thread (an append on the
event loop may assign a new epoch); `flush` makes the file durable and runs with the log's
flush, off the loop. The cache is rebuilt from the batches of recovered segments, so a file
that lost its last entries in a crash is repaired on the next load.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from pathlib import Path

from gregor.storage.checkpoints import CheckpointFile, CorruptCheckpointError, leader_epoch_file

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    # Slots: the fast append's C twin reads `version` through its offset.
    __slots__ = ("_dirty", "_epochs", "_file", "_lock", "_offsets", "corrupt_on_load", "version")

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[int, int]] = leader_epoch_file(path)
        self._lock = threading.Lock()
        self._dirty = False
        try:
            loaded = self._file.read()
        except CorruptCheckpointError:
            loaded = []
            self.corrupt_on_load = True
        else:
            self.corrupt_on_load = False
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        # Counts the changes after loading: a caller that saw `assign(epoch, offset)` do
        # nothing may skip the next assign of that epoch at a later offset while it holds.
        self.version = 0
        for epoch, offset in loaded:
            self._assign(epoch, offset)

    @property
    def path(self) -> Path:
        return self._file.path

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._offsets, strict=True))

    def latest_epoch(self) -> int | None:
        epochs = self._epochs
        return epochs[-1] if epochs else None

    def latest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return (self._epochs[-1], self._offsets[-1]) if self._epochs else None

    def earliest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return (self._epochs[0], self._offsets[0]) if self._epochs else None

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        epochs, offsets = self._epochs, self._offsets
        if epochs and epochs[-1] == epoch and start_offset >= offsets[-1]:
            return False
        # Entries with a later epoch or a later start offset conflict with the new one.
        while epochs and (epochs[-1] >= epoch or offsets[-1] >= start_offset):
            epochs.pop()
            offsets.pop()
        epochs.append(epoch)
        offsets.append(start_offset)
        return True

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` began at `start_offset` (a no-op when already known)."""
        epochs = self._epochs
        if epochs and epochs[-1] == epoch and start_offset >= self._offsets[-1]:
            return  # the common case: another batch of the current epoch
        with self._lock:
            changed = self._assign(epoch, start_offset)
        if changed:
            self._write()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch, as Kafka answers it.

        The latest epoch ends at the log end offset; an older one at the start of the next
        known epoch (with the largest known epoch at or below the requested one); an epoch
        older than all known ones at the first known start offset; else undefined (-1, -1).
        """
        with self._lock:
            epochs, offsets = self._epochs, self._offsets
            if requested_epoch == UNDEFINED_EPOCH or not epochs:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if epochs[-1] == requested_epoch:
                return requested_epoch, log_end_offset
            higher = bisect_right(epochs, requested_epoch)
            if higher == len(epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, offsets[0]
            return epochs[higher - 1], offsets[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the leader that wrote `offset`, when known."""
        with self._lock:
            i = bisect_right(self._offsets, offset) - 1
            return self._epochs[i] if i >= 0 else None

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        with self._lock:
            epochs, offsets = self._epochs, self._offsets
            if not offsets or offsets[-1] < end_offset:
                return
            while offsets and offsets[-1] >= end_offset:
                epochs.pop()
                offsets.pop()
        self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch holding it starts there."""
        with self._lock:
            epochs, offsets = self._epochs, self._offsets
            i = bisect_right(offsets, start_offset)
            if i == 0:
                return
            kept_epoch = epochs[i - 1]
            del epochs[: i - 1]
            del offsets[: i - 1]
            epochs[0], offsets[0] = kept_epoch, start_offset
        self._write()

    def clear(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._offsets.clear()
        self._write()

    def _write(self) -> None:
        self.version += 1
        self._file.write(self.entries(), sync=False)
        self._dirty = True

    def flush(self) -> None:
        """fsync the checkpoint if it changed since the last flush."""
        if self._dirty:
            self._dirty = False
            self._file.write(self.entries(), sync=True)
