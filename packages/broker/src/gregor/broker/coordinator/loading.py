"""Reading a coordinator's internal-topic partition from its start, as a new coordinator
does before it answers, and the epoch check that orders loads and unloads: the group
and transaction coordinators share both."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import trio

from gregor.protocol.records import RecordBatch, iter_batches
from gregor.storage.log import Log
from gregor.storage.results import FetchIsolation


async def replay_log(
    source: Log,
    replay: Callable[[RecordBatch], None],
    still_loading: Callable[[], bool],
    buffer_size: int,
) -> None:
    """Hand every batch of `source` to `replay`, in order, reading `buffer_size` bytes at a
    time off the event loop; stop early once `still_loading()` is false (the load was
    overtaken by a newer epoch, or the broker is shutting down)."""
    offset = source.log_start_offset
    while offset < source.log_end_offset and still_loading():
        data = await trio.to_thread.run_sync(partial(_read_chunk, source, offset, buffer_size))
        if not data:
            return
        for batch in iter_batches(data):
            replay(batch)
            offset = batch.header.next_offset


def _read_chunk(source: Log, offset: int, buffer_size: int) -> bytes:
    return source.read(offset, buffer_size, FetchIsolation.LOG_END).records.read()


def record_epoch(epochs: dict[int, int], partition: int, epoch: int | None) -> bool:
    """Record `epoch` as the partition's latest coordinator epoch; False if a newer one was
    already seen (a stale load or unload to ignore). `None` (no epoch known) always goes."""
    if epoch is None:
        return True
    current = epochs.get(partition)
    if current is not None and epoch < current:
        return False
    epochs[partition] = epoch
    return True
