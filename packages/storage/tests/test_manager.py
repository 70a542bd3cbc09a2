"""The log manager: directories, meta.properties, checkpoints, restarts, offline
directories, and the trio background services."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from storage_testing import FakeClock, make_batch, read_records

from gregor.protocol.errors import InconsistentClusterIdError, KafkaStorageError
from gregor.storage import LogConfig, LogManagerConfig
from gregor.storage.checkpoints import (
    OffsetCheckpointFile,
    read_meta_properties,
    read_partition_metadata,
)
from gregor.storage.files import FileHandle
from gregor.storage.manager import CLEAN_SHUTDOWN_FILE, InconsistentBrokerIdError, LogManager


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "d1", tmp_path / "d2"]


@pytest.fixture
def managers() -> Iterator[list[LogManager]]:
    opened: list[LogManager] = []
    yield opened
    for manager in opened:
        manager.close()


def _open(
    dirs: list[Path], managers: list[LogManager], clock: FakeClock | None = None, **settings: object
) -> LogManager:
    config = LogManagerConfig.from_server_properties(
        {"log.dirs": ",".join(str(d) for d in dirs), "broker.id": "1", **settings}
    )
    manager = LogManager.open(
        config,
        LogConfig.from_properties({"segment.bytes": "300", "file.delete.delay.ms": "0"}),
        cluster_id="cluster-A",
        **({"clock": clock} if clock is not None else {}),
    )
    managers.append(manager)
    return manager


def _crash(manager: LogManager, managers: list[LogManager]) -> None:
    """Forget a manager as a killed process would: no close, locks released."""
    for log_dir in manager._dirs:
        if log_dir.lock_fd is not None:
            os.close(log_dir.lock_fd)
            log_dir.lock_fd = None
    for log in manager.logs.values():
        log.closed = True
    managers.remove(manager)


def _append(manager: LogManager, topic: str, partition: int, n: int) -> None:
    log = manager.get_or_create_log(topic, partition)
    for _ in range(n):
        log.append_as_leader(make_batch([b"x" * 100], timestamp=log.clock()), 0)
    log.update_high_watermark(log.log_end_offset)


def test_directories_and_meta_properties(dirs: list[Path], managers: list[LogManager]) -> None:
    _open(dirs, managers)
    for d in dirs:
        assert read_meta_properties(d) == {
            "version": "0",
            "broker.id": "1",
            "cluster.id": "cluster-A",
        }
    with pytest.raises(KafkaStorageError, match="in use by another process"):
        _open(dirs, managers)


def test_foreign_directories_are_refused(dirs: list[Path], managers: list[LogManager]) -> None:
    _open(dirs, managers).close()
    managers.clear()
    config = LogManagerConfig(log_dirs=tuple(str(d) for d in dirs), broker_id=2)
    with pytest.raises(InconsistentBrokerIdError, match="belongs to broker 1"):
        LogManager.open(config)
    config = LogManagerConfig(log_dirs=tuple(str(d) for d in dirs), broker_id=1)
    with pytest.raises(InconsistentClusterIdError, match="cluster-A"):
        LogManager.open(config, cluster_id="cluster-B")


def test_logs_spread_over_directories(dirs: list[Path], managers: list[LogManager]) -> None:
    manager = _open(dirs, managers)
    topic_id = uuid.uuid4()
    logs = [manager.get_or_create_log("t", p, topic_id=topic_id) for p in range(4)]
    assert sorted(len(list(d.glob("t-*"))) for d in dirs) == [2, 2]
    assert manager.get_or_create_log("t", 0) is logs[0]
    assert manager.get_log("t", 9) is None
    assert read_partition_metadata(logs[0].dir) == topic_id


def test_clean_restart(dirs: list[Path], managers: list[LogManager]) -> None:
    manager = _open(dirs, managers)
    _append(manager, "a", 0, 5)
    _append(manager, "b", 1, 3)
    manager.get_log("a", 0).delete_records(2)  # type: ignore[union-attr]
    manager.close()
    managers.clear()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
    hw = {}
    for d in dirs:
        hw.update(OffsetCheckpointFile(d / "replication-offset-checkpoint").read())
    assert hw == {("a", 0): 5, ("b", 1): 3}
    again = _open(dirs, managers)
    a = again.get_log("a", 0)
    assert a is not None and (a.log_start_offset, a.log_end_offset, a.high_watermark) == (2, 5, 5)
    assert a.recovery_point == 5
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)


def test_restart_after_a_crash_recovers(dirs: list[Path], managers: list[LogManager]) -> None:
    manager = _open(dirs, managers)
    _append(manager, "a", 0, 6)
    log = manager.get_log("a", 0)
    assert log is not None
    expected = [r.offset for r in read_records(log)]
    tail = log.active_segment.log_path
    _crash(manager, managers)
    with tail.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x10\x00garbage")
    again = _open(dirs, managers)
    recovered = again.get_log("a", 0)
    assert recovered is not None and [r.offset for r in read_records(recovered)] == expected


def test_delete_log(dirs: list[Path], managers: list[LogManager]) -> None:
    manager = _open(dirs, managers)
    _append(manager, "gone", 0, 2)
    directory = manager.get_log("gone", 0).dir  # type: ignore[union-attr]
    assert manager.delete_log("gone", 0)
    assert not directory.exists() and manager.get_log("gone", 0) is None
    assert list(directory.parent.glob("gone-0.*-delete"))
    manager.deletions.run_due()
    assert not list(directory.parent.glob("gone-0*"))
    assert not manager.delete_log("gone", 0)


def test_a_failed_directory_goes_offline_alone(
    dirs: list[Path], managers: list[LogManager]
) -> None:
    manager = _open(dirs, managers)
    failed: list[Path] = []
    manager.on_dir_failure = failed.append
    _append(manager, "t", 0, 1)
    _append(manager, "t", 1, 1)
    bad = manager.get_log("t", 0)
    good = manager.get_log("t", 1)
    assert bad is not None and good is not None and bad.dir.parent != good.dir.parent
    bad.active_segment._log = FileHandle(Path("/dev/full"), os.O_WRONLY)
    with pytest.raises(KafkaStorageError):
        bad.append_as_leader(make_batch([b"x"]), 0)
    assert failed == [bad.dir.parent] and manager.offline_dirs == [bad.dir.parent]
    with pytest.raises(KafkaStorageError, match="offline log directory"):
        manager.get_log("t", 0)
    good.append_as_leader(make_batch([b"still fine"]), 0)
    # new logs go to the directory that works
    assert manager.get_or_create_log("t", 2).dir.parent == good.dir.parent


def test_a_directory_failing_in_two_threads_at_once_does_not_deadlock(
    dirs: list[Path], managers: list[LogManager]
) -> None:
    """One thread's append fails while it holds its log's lock; meanwhile another thread
    (a checkpoint write, a log's creation) finds the same directory failed and closes that
    log's files. Each then needs the lock the other holds, unless the manager lets go of
    its own before it closes the logs."""
    manager = _open(dirs, managers)
    _append(manager, "t", 0, 1)
    appending = manager.get_log("t", 0)
    assert appending is not None
    log_dir = next(d for d in manager._dirs if d.path == appending.dir.parent)
    with appending._lock:  # the append under way
        closer = threading.Thread(
            target=manager._dir_failed, args=(log_dir, OSError(28, "No space")), daemon=True
        )
        closer.start()
        # the closer holds the manager's lock, or has let go of it and waits for the log's
        reporter = threading.Thread(
            target=manager._log_io_error, args=(appending, OSError(28, "No space")), daemon=True
        )
        closer.join(0.5)
        reporter.start()
        reporter.join(10)
        assert not reporter.is_alive(), "the failing append's report waits forever"
    closer.join(10)
    assert not closer.is_alive(), "closing the directory's logs waits forever"
    assert appending.closed and manager.offline_dirs == [appending.dir.parent]


def test_corrupt_checkpoints_are_ignored(dirs: list[Path], managers: list[LogManager]) -> None:
    manager = _open(dirs, managers)
    _append(manager, "a", 0, 3)
    manager.close()
    managers.clear()
    for d in dirs:
        (d / "recovery-point-offset-checkpoint").write_text("0\n5\nnonsense\n")
    again = _open(dirs, managers)
    a = again.get_log("a", 0)
    assert a is not None and a.log_end_offset == 3


def test_services_flush_retain_checkpoint_and_stop(
    dirs: list[Path], managers: list[LogManager]
) -> None:
    manager = _open(
        dirs,
        managers,
        **{
            "log.retention.check.interval.ms": "20",
            "log.flush.offset.checkpoint.interval.ms": "20",
            "replica.high.watermark.checkpoint.interval.ms": "20",
            "log.cleaner.backoff.ms": "20",
        },
    )
    log = manager.get_or_create_log("t", 0)
    managers.clear()  # run() closes it

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            for _ in range(5):
                log.append_as_leader(make_batch([b"x" * 100], timestamp=log.clock()), 0)
            log.update_high_watermark(log.log_end_offset)
            with trio.fail_after(20):
                while log.recovery_point < log.active_segment.base_offset:
                    await trio.sleep(0.01)  # the roll asked for a flush, done in a thread
                log.delete_records(3)
                while log.segments.first.base_offset < 3:
                    await trio.sleep(0.01)  # retention removed the segments below the start
                checkpoint = OffsetCheckpointFile(log.dir.parent / "replication-offset-checkpoint")
                while checkpoint.read().get(("t", 0)) != 5:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert log.closed
    assert (log.dir.parent / CLEAN_SHUTDOWN_FILE).exists()


def test_the_cleaner_service_compacts(dirs: list[Path], managers: list[LogManager]) -> None:
    manager = _open(dirs, managers, **{"log.cleaner.backoff.ms": "10"})
    log = manager.get_or_create_log(
        "compacted",
        0,
        config=LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": "300"}),
    )
    for i in range(30):
        log.append_as_leader(
            make_batch([b"v%d" % i], keys=[b"k%d" % (i % 2)], timestamp=log.clock()), 0
        )
    log.update_high_watermark(log.log_end_offset)
    managers.clear()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            with trio.fail_after(20):
                while len(read_records(log)) > 5:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    checkpoint = OffsetCheckpointFile(log.dir.parent / "cleaner-offset-checkpoint").read()
    assert checkpoint[("compacted", 0)] > 0
