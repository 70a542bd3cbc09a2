"""Supervised local processes: each started in a session of its own (a Ctrl-C in the
launcher's terminal is for the launcher alone), its output appended to a log file, stopped
gracefully and killed when that takes too long. No process outlives the launcher's `stop`,
nor the launcher itself: a launcher killed outright (a test run cut short by SIGKILL skips
every fixture's teardown) takes its processes with it, through the parent-death signal."""

from __future__ import annotations

import ctypes
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from gregor.devcluster.namespaces import call_in, exec_prefix

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll `predicate()` until it is true; raise TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def orphan_guard() -> list[str]:
    """An argv prefix that makes the child get SIGTERM when its parent dies.

    util-linux's `setpriv --pdeathsig` sets it and execs the command, so the process keeps
    its pid and argv. Linux ties the signal to the thread that forked, not the process:
    a child spawned from another thread (a fault injector's, say) would be stopped when
    that thread ends, so only the main thread's children get the guard.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return []
    return [setpriv, "--pdeathsig", "TERM", "--"]


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Have Linux send this process `signum` when its parent exits (PR_SET_PDEATHSIG).

    For a launcher run under another program: nox, for one, exits on SIGTERM without
    passing it on, which would leave the launcher and its cluster running.
    """
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signum, 0, 0, 0)


class Supervised:
    """One process, named `name` in errors, writing to `log_path`; inside the network
    namespace `namespace` if one is given (the two-datacenter topology's hosts)."""

    def __init__(self, name: str, log_path: Path, namespace: str | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self.namespace = namespace
        self.process: subprocess.Popen[bytes] | None = None

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` as run where this process lives (inside its namespace, if it has one)."""
        return [*exec_prefix(self.namespace), *argv] if self.namespace else list(argv)

    def probe(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` where this process's network is: its probes' sockets open there."""
        return call_in(self.namespace, fn, *args) if self.namespace else fn(*args)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def spawn(self, argv: Sequence[str]) -> None:
        """Start `argv` without waiting for it to be ready."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*orphan_guard(), *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        """Raise RuntimeError if the process was started and has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with status {self.process.returncode}")

    def log_tail(self, size: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def signal(self, signum: int) -> None:
        if self.is_running():
            assert self.process is not None
            self.process.send_signal(signum)

    def terminate(self) -> None:
        """SIGTERM: a graceful stop; see `wait`."""
        self.resume()  # a stopped process cannot handle SIGTERM
        self.signal(signal.SIGTERM)

    def wait(self, timeout: float = 60.0) -> int | None:
        """Wait for the process to exit; SIGKILL it if it does not in time. Its exit status."""
        process = self.process
        if process is None:
            return None
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def stop(self, timeout: float = 60.0) -> int | None:
        """Graceful stop; SIGKILL if it takes longer than `timeout`. Returns the exit status."""
        self.terminate()
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the process vanishes, as in a crash."""
        if self.is_running():
            assert self.process is not None
            self.process.kill()
            self.process.wait()

    def pause(self) -> None:
        """SIGSTOP: the process freezes (its ZooKeeper session expires if this lasts)."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
