"""Files waiting for `file.delete.delay.ms` before they are unlinked.

Deleted segments are renamed `.deleted` at once (they leave the log) and unlinked later, so a
fetch that found the segment just before keeps reading it. The log manager runs `run_due` off
the event loop; a log without a manager runs it on its own when it closes.
"""

from __future__ import annotations

import heapq
import logging
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)


class DeletionQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, tuple[Path, ...]]] = []
        self._seq = 0

    def schedule(self, paths: Iterable[Path], due_ms: int) -> None:
        with self._lock:
            self._seq += 1
            heapq.heappush(self._heap, (due_ms, self._seq, tuple(paths)))

    def __len__(self) -> int:
        return len(self._heap)

    def next_due(self) -> int | None:
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def run_due(self, now_ms: int | None = None) -> int:
        """Unlink every file that is due (all of them when `now_ms` is None)."""
        done = 0
        while True:
            with self._lock:
                if not self._heap or (now_ms is not None and self._heap[0][0] > now_ms):
                    return done
                _due, _seq, paths = heapq.heappop(self._heap)
            for path in paths:
                try:
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink(missing_ok=True)
                except OSError as exc:
                    log.warning("could not delete %s: %s", path, exc)
            done += len(paths)
