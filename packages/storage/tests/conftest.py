"""Fixtures of the gregor-storage tests (helpers are in storage_testing.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # test modules import storage_testing

from storage_testing import FakeClock, LogOpener

from gregor.storage import Log, LogConfig, open_log
from gregor.storage.deletion import DeletionQueue


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def open_test_log(log_dir: Path, clock: FakeClock) -> Iterator[LogOpener]:
    """`open_test_log(segment_bytes=..., load_recovery_point=...)`: a log in a temp dir with
    the fake clock (config keys with dots as underscores; `load_*` go to `open_log`)."""
    opened: list[Log] = []
    deletions = DeletionQueue()

    def opener(directory: Path | None = None, **kwargs: object) -> Log:
        props = {k.replace("_", "."): v for k, v in kwargs.items() if not k.startswith("load_")}
        load = {k[5:]: v for k, v in kwargs.items() if k.startswith("load_")}
        config = LogConfig.from_properties(props)
        log = open_log(directory or log_dir, config, clock=clock, deletions=deletions, **load)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield opener
    for log in opened:
        if not log.closed and not log.offline:
            log.close()
