"""The log manager: a broker's log directories, its logs, and the background tasks.

- Each directory of `log.dirs` is locked (`.lock`), holds `meta.properties` (broker and
  cluster id), the offset checkpoint files and one directory per partition. All logs are
  loaded at startup, several directories in parallel; a clean shutdown leaves
  `.kafka_cleanshutdown` so the next start skips recovery.
- `run()` starts the background tasks in a trio nursery: flush (on roll, `flush.messages`,
  `flush.ms`), retention, delayed file deletion, producer id expiration, the checkpoints and
  the cleaner. Their disk work runs in threads, never on the event loop. Cancelling `run()`
  stops them and closes every log cleanly.
- A directory whose I/O fails goes offline: its logs are dropped, `on_dir_failure` is told,
  and the other directories keep working.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import trio

from gregor.protocol.errors import InconsistentClusterIdError, KafkaStorageError
from gregor.storage.checkpoints import (
    CLEANER_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
    read_meta_properties,
    write_meta_properties,
)
from gregor.storage.cleaner import Cleaner, CleaningAbortedError, grab_filthiest
from gregor.storage.config import LogConfig, LogManagerConfig
from gregor.storage.deletion import DeletionQueue
from gregor.storage.files import atomic_write
from gregor.storage.loader import open_log
from gregor.storage.log import Clock, Log, wall_clock_ms
from gregor.storage.names import (
    delete_dir_name,
    is_delete_dir,
    parse_partition_dir,
    partition_dir_name,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
LOCK_FILE: Final = ".lock"


class InconsistentBrokerIdError(KafkaStorageError):
    """A log directory that belongs to another broker."""


class _LogDir:
    """One directory of `log.dirs` with its checkpoint files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offline = False
        self.lock_fd: int | None = None
        self.recovery_points = OffsetCheckpointFile(path / RECOVERY_POINT_CHECKPOINT)
        self.high_watermarks = OffsetCheckpointFile(path / REPLICATION_CHECKPOINT)
        self.log_start_offsets = OffsetCheckpointFile(path / LOG_START_OFFSET_CHECKPOINT)
        self.cleaner_offsets = OffsetCheckpointFile(path / CLEANER_CHECKPOINT)
        self.cleaner_checkpoint: dict[TopicPartition, int] = {}

    def read(self, checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read()
        except CorruptCheckpointError as exc:
            log.warning("%s: ignoring a corrupt checkpoint: %s", self.path, exc)
            return {}


class LogManager:
    def __init__(
        self,
        config: LogManagerConfig,
        default_config: LogConfig | None = None,
        *,
        cluster_id: str | None = None,
        topic_config: Callable[[str], LogConfig] | None = None,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.config = config
        self.default_config = default_config or LogConfig()
        self.cluster_id = cluster_id
        self._topic_config = topic_config
        self.clock = clock
        self.deletions = DeletionQueue()
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._offline_partitions: set[TopicPartition] = set()
        self._dirs = [_LogDir(Path(d).absolute()) for d in config.log_dirs]
        self._flush_requests: set[Log] = set()
        self._flush_wakeup: Callable[[], None] | None = None
        self._cleaner = Cleaner(
            dedupe_buffer_size=config.cleaner_dedupe_buffer_size,
            io_max_bytes_per_second=config.cleaner_io_max_bytes_per_second,
        )
        self._closed = False
        # The broker's hook: a log directory went offline.
        self.on_dir_failure: Callable[[Path], None] | None = None

    # -- startup -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        config: LogManagerConfig,
        default_config: LogConfig | None = None,
        **kwargs: Any,
    ) -> LogManager:
        """Lock the directories, check `meta.properties` and load every log (blocking)."""
        manager = cls(config, default_config, **kwargs)
        manager.startup()
        return manager

    def startup(self) -> None:
        try:
            self._startup()
        except BaseException:
            self._release_locks()
            raise

    def _release_locks(self) -> None:
        for log_dir in self._dirs:
            if log_dir.lock_fd is not None:
                os.close(log_dir.lock_fd)
                log_dir.lock_fd = None

    def _startup(self) -> None:
        for log_dir in self._dirs:
            try:
                self._prepare_dir(log_dir)
            except OSError as exc:
                log.error("log directory %s is offline: %s", log_dir.path, exc)
                log_dir.offline = True
        live = [d for d in self._dirs if not d.offline]
        if not live:
            raise KafkaStorageError(f"no usable log directory among {self.config.log_dirs}")
        workers = max(1, self.config.num_recovery_threads_per_data_dir) * len(live)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-load") as pool:
            futures = [(d, pool.submit(self._load_dir, d)) for d in live]
            for log_dir, future in futures:
                try:
                    future.result()
                except OSError as exc:
                    self._dir_failed(log_dir, exc)

    def _prepare_dir(self, log_dir: _LogDir) -> None:
        log_dir.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(log_dir.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise KafkaStorageError(
                f"log directory {log_dir.path} is in use by another process"
            ) from None
        log_dir.lock_fd = fd
        meta = read_meta_properties(log_dir.path)
        broker_id = self.config.broker_id
        if meta is None:
            props = {"version": "0"}
            if broker_id >= 0:
                props["broker.id"] = str(broker_id)
            if self.cluster_id is not None:
                props["cluster.id"] = self.cluster_id
            write_meta_properties(log_dir.path, props)
            return
        stored_broker = meta.get("broker.id", meta.get("node.id"))
        if broker_id >= 0 and stored_broker is not None and stored_broker != str(broker_id):
            raise InconsistentBrokerIdError(
                f"{log_dir.path}/meta.properties belongs to broker {stored_broker}, "
                f"this is broker {broker_id}"
            )
        stored_cluster = meta.get("cluster.id")
        if self.cluster_id is not None and stored_cluster not in (None, self.cluster_id):
            raise InconsistentClusterIdError(
                f"{log_dir.path}/meta.properties belongs to cluster {stored_cluster}, "
                f"not {self.cluster_id}"
            )
        if self.cluster_id is None:
            self.cluster_id = stored_cluster

    def _load_dir(self, log_dir: _LogDir) -> None:
        path = log_dir.path
        clean = (path / CLEAN_SHUTDOWN_FILE).exists()
        recovery = log_dir.read(log_dir.recovery_points)
        starts = log_dir.read(log_dir.log_start_offsets)
        hws = log_dir.read(log_dir.high_watermarks)
        log_dir.cleaner_checkpoint = log_dir.read(log_dir.cleaner_offsets)
        candidates: list[tuple[TopicPartition, Path]] = []
        for entry in sorted(os.listdir(path)):
            child = path / entry
            if not child.is_dir():
                continue
            if is_delete_dir(entry):
                self.deletions.schedule([child], self.clock())
                continue
            tp = parse_partition_dir(entry)
            if tp is not None:
                candidates.append((tp, child))
        threads = max(1, self.config.num_recovery_threads_per_data_dir)
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="log-recovery") as pool:
            loaded = [
                (
                    tp,
                    pool.submit(
                        self._open_log,
                        child,
                        tp,
                        log_start_offset=starts.get(tp, 0),
                        recovery_point=recovery.get(tp, 0),
                        high_watermark=hws.get(tp, 0),
                        clean_shutdown=clean,
                    ),
                )
                for tp, child in candidates
            ]
            for tp, future in loaded:
                opened = future.result()
                with self._lock:
                    if tp in self._logs:
                        raise KafkaStorageError(
                            f"{tp[0]}-{tp[1]} is in two log directories: "
                            f"{self._logs[tp].dir.parent} and {path}"
                        )
                    self._logs[tp] = opened
        if clean:
            (path / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config is not None else self.default_config

    def _open_log(self, directory: Path, tp: TopicPartition, **kwargs: Any) -> Log:
        opened = open_log(
            directory,
            self._config_for(tp[0]),
            clock=self.clock,
            deletions=self.deletions,
            producer_id_expiration_ms=self.config.producer_id_expiration_ms,
            max_txn_timeout_ms=self.config.max_transaction_timeout_ms,
            **kwargs,
        )
        self._attach(opened)
        return opened

    def _attach(self, opened: Log) -> None:
        opened.on_flush_needed = self._request_flush
        opened.on_io_error = self._log_io_error

    # -- logs --------------------------------------------------------------------------------

    @property
    def logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    @property
    def live_dirs(self) -> list[Path]:
        return [d.path for d in self._dirs if not d.offline]

    @property
    def offline_dirs(self) -> list[Path]:
        return [d.path for d in self._dirs if d.offline]

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The log of a partition on this broker, None if there is none.

        Raises KafkaStorageError when the partition's directory is offline.
        """
        tp = (topic, partition)
        with self._lock:
            if tp in self._offline_partitions:
                raise KafkaStorageError(f"{topic}-{partition} is in an offline log directory")
            return self._logs.get(tp)

    def get_or_create_log(
        self,
        topic: str,
        partition: int,
        *,
        topic_id: uuid.UUID | None = None,
        config: LogConfig | None = None,
    ) -> Log:
        """The partition's log, created (in the directory with the fewest logs) if needed."""
        existing = self.get_log(topic, partition)
        if existing is not None:
            if topic_id is not None and existing.topic_id is None:
                existing.write_topic_id(topic_id)
            return existing
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            log_dir = self._pick_dir()
            directory = log_dir.path / partition_dir_name(topic, partition)
            try:
                created = open_log(
                    directory,
                    config or self._config_for(topic),
                    topic_id=topic_id,
                    clock=self.clock,
                    deletions=self.deletions,
                    producer_id_expiration_ms=self.config.producer_id_expiration_ms,
                    max_txn_timeout_ms=self.config.max_transaction_timeout_ms,
                )
            except OSError as exc:
                self._dir_failed(log_dir, exc)
                raise KafkaStorageError(
                    f"cannot create {topic}-{partition} in {log_dir.path}: {exc}"
                ) from exc
            self._attach(created)
            self._logs[(topic, partition)] = created
            return created

    def _pick_dir(self) -> _LogDir:
        live = [d for d in self._dirs if not d.offline]
        if not live:
            raise KafkaStorageError("every log directory is offline")
        if len(live) == 1:  # the count below, per new log, made creating N logs O(N^2)
            return live[0]
        counts = {d.path: 0 for d in live}
        for opened in self._logs.values():
            parent = opened.dir.parent
            if parent in counts:
                counts[parent] += 1
        return min(live, key=lambda d: counts[d.path])

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove a partition's log: its directory is renamed `...-delete` and removed later."""
        tp = (topic, partition)
        with self._lock:
            removed = self._logs.pop(tp, None)
            self._offline_partitions.discard(tp)
        if removed is None:
            return False
        removed.delete()
        for log_dir in self._dirs:
            log_dir.cleaner_checkpoint.pop(tp, None)
        target = removed.dir.with_name(delete_dir_name(topic, partition))
        try:
            os.replace(removed.dir, target)
        except OSError as exc:
            self._log_io_error(removed, exc)
            return True
        self.deletions.schedule([target], self.clock() + removed.config.file_delete_delay_ms)
        return True

    def update_config(self, topic: str, config: LogConfig) -> None:
        """New settings for every partition of `topic` (a config change)."""
        with self._lock:
            for (t, _p), opened in self._logs.items():
                if t == topic:
                    opened.config = config

    # -- failures ----------------------------------------------------------------------------

    def _log_io_error(self, failed: Log, exc: OSError) -> None:
        for log_dir in self._dirs:
            if log_dir.path == failed.dir.parent:
                self._dir_failed(log_dir, exc)

    def _dir_failed(self, log_dir: _LogDir, exc: BaseException) -> None:
        with self._lock:
            if log_dir.offline:
                return
            log_dir.offline = True
            log.error("log directory %s went offline: %s", log_dir.path, exc)
            gone = [(tp, lg) for tp, lg in self._logs.items() if lg.dir.parent == log_dir.path]
            for tp, opened in gone:
                opened.offline = True
                del self._logs[tp]
                self._offline_partitions.add(tp)
        # Outside the manager's lock: a log whose write failed reports here holding its own
        # lock, which close_handles takes; holding both the other way round deadlocked.
        hook = self.on_dir_failure
        if hook is not None:
            hook(log_dir.path)  # the broker halts here once no directory is left
        for _tp, opened in gone:
            opened.close_handles()

    # -- periodic work (synchronous, run in threads by the services) ---------------------------

    def _logs_in(self, log_dir: _LogDir) -> dict[TopicPartition, Log]:
        with self._lock:
            return {tp: lg for tp, lg in self._logs.items() if lg.dir.parent == log_dir.path}

    def _write_checkpoint(
        self, log_dir: _LogDir, checkpoint: OffsetCheckpointFile, offsets: dict[TopicPartition, int]
    ) -> None:
        if log_dir.offline:
            return
        try:
            checkpoint.write(offsets)
        except OSError as exc:
            self._dir_failed(log_dir, exc)

    def checkpoint_recovery_points(self) -> None:
        for d in self._dirs:
            offsets = {tp: lg.recovery_point for tp, lg in self._logs_in(d).items()}
            self._write_checkpoint(d, d.recovery_points, offsets)

    def checkpoint_log_start_offsets(self) -> None:
        # As Kafka: only the logs whose start moved past their first segment.
        for d in self._dirs:
            offsets = {
                tp: lg.log_start_offset
                for tp, lg in self._logs_in(d).items()
                if lg.log_start_offset > lg.segments.first.base_offset
            }
            self._write_checkpoint(d, d.log_start_offsets, offsets)

    def checkpoint_high_watermarks(self) -> None:
        for d in self._dirs:
            offsets = {tp: lg.high_watermark for tp, lg in self._logs_in(d).items()}
            self._write_checkpoint(d, d.high_watermarks, offsets)

    def checkpoint_cleaner_offsets(self) -> None:
        for d in self._dirs:
            live = self._logs_in(d)
            offsets = {tp: off for tp, off in d.cleaner_checkpoint.items() if tp in live}
            self._write_checkpoint(d, d.cleaner_offsets, offsets)

    def flush_logs(self, *, force: bool = False) -> int:
        """Flush the logs that asked for it, and those past `flush.ms`. Returns how many."""
        with self._lock:
            requested, self._flush_requests = self._flush_requests, set()
            candidates = list(self._logs.values())
        now = self.clock()
        flushed = 0
        for opened in candidates:
            due = now - opened.last_flush_ms >= opened.config.flush_ms
            if force or due or opened in requested:
                try:
                    opened.flush()
                    flushed += 1
                except KafkaStorageError as exc:
                    log.error("flush of %s failed: %s", opened.name, exc)
        return flushed

    def _request_flush(self, requester: Log) -> None:
        with self._lock:
            self._flush_requests.add(requester)
        wakeup = self._flush_wakeup
        if wakeup is not None:
            wakeup()
        # Without running services, flushes wait for the next flush_logs().

    def cleanup_logs(self) -> int:
        """Retention for every log; returns the number of segments deleted."""
        deleted = 0
        for opened in self.logs.values():
            try:
                deleted += opened.delete_old_segments()
            except KafkaStorageError as exc:
                log.error("retention of %s failed: %s", opened.name, exc)
        return deleted

    def expire_producers(self) -> None:
        for opened in self.logs.values():
            opened.remove_expired_producers()

    def clean_once(self) -> bool:
        """Clean the dirtiest compacted log, if any is dirty enough. Returns whether one was."""
        now = self.clock()
        with self._lock:
            candidates = []
            for tp, opened in self._logs.items():
                log_dir = self._dir_of(opened)
                candidates.append((opened, log_dir.cleaner_checkpoint.get(tp) if log_dir else None))
        target = grab_filthiest(candidates, now)
        if target is None:
            return False
        try:
            end, stats = self._cleaner.clean(target, now)
        except CleaningAbortedError as exc:
            log.info("cleaning of %s stopped: %s", target.log.name, exc)
            return False
        except KafkaStorageError as exc:
            log.error("cleaning of %s failed: %s", target.log.name, exc)
            return False
        except Exception:
            # e.g. a segment truncated under the cleaner: this round is lost, not the service
            log.exception("cleaning of %s failed", target.log.name)
            return False
        log_dir = self._dir_of(target.log)
        if log_dir is not None:
            log_dir.cleaner_checkpoint[target.log.topic_partition] = end
        log.info("cleaned %s up to %d: %s", target.log.name, end, stats)
        return True

    def _dir_of(self, opened: Log) -> _LogDir | None:
        for log_dir in self._dirs:
            if log_dir.path == opened.dir.parent:
                return log_dir
        return None

    # -- shutdown --------------------------------------------------------------------------------

    def close(self) -> None:
        """Clean shutdown: close every log, write the checkpoints and the clean-shutdown file."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._cleaner.abort.set()
        for log_dir in self._dirs:
            if log_dir.offline:
                continue
            logs = self._logs_in(log_dir)
            try:
                for opened in logs.values():
                    opened.close()
            except (OSError, KafkaStorageError) as exc:
                self._dir_failed(log_dir, exc)
                continue
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
            self.checkpoint_high_watermarks()
            self.checkpoint_cleaner_offsets()
            try:
                atomic_write(
                    log_dir.path / CLEAN_SHUTDOWN_FILE,
                    json.dumps({"version": 0, "brokerEpoch": -1}).encode(),
                )
            except OSError as exc:
                self._dir_failed(log_dir, exc)
        self.deletions.run_due(self.clock())
        self._release_locks()

    # -- background services (trio) ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the background tasks until cancelled, then close every log cleanly."""
        token = trio.lowlevel.current_trio_token()
        wake = trio.Event()
        wake_box = [wake]

        def wakeup() -> None:
            token.run_sync_soon(lambda: wake_box[0].set())

        self._flush_wakeup = wakeup
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._flush_service, wake_box)
                nursery.start_soon(
                    self._every, self.config.retention_check_interval_ms, self.cleanup_logs
                )
                nursery.start_soon(self._deletion_service)
                nursery.start_soon(
                    self._every,
                    self.config.producer_id_expiration_check_interval_ms,
                    self.expire_producers,
                )
                nursery.start_soon(
                    self._every,
                    self.config.flush_offset_checkpoint_interval_ms,
                    self.checkpoint_recovery_points,
                )
                nursery.start_soon(
                    self._every,
                    self.config.flush_start_offset_checkpoint_interval_ms,
                    self.checkpoint_log_start_offsets,
                )
                nursery.start_soon(
                    self._every,
                    self.config.high_watermark_checkpoint_interval_ms,
                    self.checkpoint_high_watermarks,
                )
                if self.config.cleaner_enable and self.config.cleaner_threads > 0:
                    nursery.start_soon(self._cleaner_service)
                    nursery.start_soon(self._abort_cleaning_on_cancel)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._flush_wakeup = None
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.close)

    @staticmethod
    def _seconds(ms: float) -> float:
        return math.inf if ms >= 2**62 else ms / 1000

    async def _every(self, interval_ms: int, work: Callable[[], object]) -> None:
        interval = self._seconds(interval_ms)
        while True:
            await trio.sleep(interval)
            await trio.to_thread.run_sync(self._guarded, work)

    @staticmethod
    def _guarded(work: Callable[[], object]) -> None:
        # A bug met by one periodic task must not stop the others (or the broker).
        try:
            work()
        except Exception:
            log.exception("background task %s failed", getattr(work, "__name__", work))

    async def _flush_service(self, wake_box: list[trio.Event]) -> None:
        interval = self._seconds(self.config.flush_scheduler_interval_ms)
        while True:
            with trio.move_on_after(interval):
                await wake_box[0].wait()
            wake_box[0] = trio.Event()
            await trio.to_thread.run_sync(self._guarded, self.flush_logs)

    async def _deletion_service(self) -> None:
        while True:
            due = self.deletions.next_due()
            now = self.clock()
            delay = 1.0 if due is None else min(max((due - now) / 1000, 0.0), 1.0)
            await trio.sleep(delay)
            if self.deletions.next_due() is not None:
                await trio.to_thread.run_sync(self._guarded, self._run_due_deletions)

    def _run_due_deletions(self) -> None:
        self.deletions.run_due(self.clock())

    async def _cleaner_service(self) -> None:
        backoff = self._seconds(self.config.cleaner_backoff_ms)
        while True:
            cleaned = await trio.to_thread.run_sync(self.clean_once)
            if cleaned:
                await trio.to_thread.run_sync(self.checkpoint_cleaner_offsets)
                await trio.sleep(0)
            else:
                await trio.sleep(backoff)

    async def _abort_cleaning_on_cancel(self) -> None:
        # A cleaning round runs in a thread that trio cannot interrupt: on cancellation, tell
        # it to stop at its next batch so shutdown does not wait for the whole round.
        try:
            await trio.sleep_forever()
        finally:
            self._cleaner.abort.set()
