"""Linux network namespaces, as `ip netns` names them (root only): create, run a command or a
Python call inside, find the processes inside, and delete them with everything they hold.

A process is started inside with `ip netns exec NAME argv` (the `exec_prefix`), which also
shows it `/etc/netns/NAME/hosts` as its `/etc/hosts`. The harness itself reaches into a
namespace from a thread that has entered it (`call_in`): a socket opened there stays in that
namespace, so readiness probes and test traffic need no link to the machine's own network.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

NETNS_RUN = Path("/run/netns")
NETNS_ETC = Path("/etc/netns")
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args: str, input: str | None = None) -> str:
    """Run `ip ARGS`; raise RuntimeError with its message if it fails."""
    done = subprocess.run(["ip", *args], input=input, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def exec_prefix(namespace: str) -> list[str]:
    """The command prefix that runs a program inside `namespace`."""
    return ["ip", "netns", "exec", namespace]


def run_in(namespace: str, argv: Sequence[str], input: str | None = None) -> str:
    """Run a command inside `namespace` and return its output; RuntimeError if it fails."""
    done = subprocess.run(
        [*exec_prefix(namespace), *argv], input=input, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} in {namespace}: {done.stderr.strip()}")
    return done.stdout


def call_in(namespace: str, fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` in a thread that has entered `namespace` (its sockets are opened there)."""
    outcome: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            with (NETNS_RUN / namespace).open("rb") as handle:
                if _libc.setns(handle.fileno(), _CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
            outcome.append(fn(*args))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=run, name=f"netns {namespace}")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return outcome[0]


def namespaces(prefix: str) -> list[str]:
    """The names of the namespaces that start with `prefix`."""
    try:
        return sorted(p.name for p in NETNS_RUN.iterdir() if p.name.startswith(prefix))
    except FileNotFoundError:
        return []


def create(namespace: str, hosts_file: str) -> None:
    """A namespace with its loopback up and `hosts_file` as its /etc/hosts."""
    etc = NETNS_ETC / namespace
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text(hosts_file)
    ip("netns", "add", namespace)
    ip("-n", namespace, "link", "set", "lo", "up")


def pids(namespace: str) -> list[int]:
    """The live processes inside `namespace`."""
    try:
        listed = ip("netns", "pids", namespace).split()
    except RuntimeError:
        return []
    return [pid for pid in map(int, listed) if alive(pid)]


def stop_processes(groups: Iterable[Iterable[str]], timeout: float) -> None:
    """SIGTERM every process inside the namespaces of each group, a group at a time, and
    SIGKILL those still there after `timeout` seconds (brokers before their ZooKeeper)."""
    for group in groups:
        targets = [pid for namespace in group for pid in pids(namespace)]
        for pid in targets:
            _signal(pid, signal.SIGCONT)  # a paused process cannot handle SIGTERM
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(map(alive, targets)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in targets:
            _signal(pid, signal.SIGKILL)
        while any(map(alive, targets)):
            time.sleep(0.01)


def delete(namespace: str) -> None:
    """Kill whatever is left inside `namespace`, delete it (its links and firewall rules go
    with it) and its /etc/netns folder."""
    stop_processes([[namespace]], timeout=0)
    if (NETNS_RUN / namespace).exists():
        ip("netns", "delete", namespace)
    shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
    try:
        NETNS_ETC.rmdir()  # only when no namespace of anyone else needs it
    except OSError:
        pass


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
