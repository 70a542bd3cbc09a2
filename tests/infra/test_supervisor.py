"""The launcher's processes die with it, also when it is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from gregor.devcluster.supervisor import orphan_guard, wait_until

LAUNCHER = """
import sys, time
from pathlib import Path
from gregor.devcluster.supervisor import Supervised
child = Supervised("sleeper", Path(sys.argv[1]))
child.spawn(["sleep", "300"])
print(child.pid, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead but still has a pid until its (new) parent reaps it
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def argv(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return cmdline.read().split(b"\0")[:-1]


@pytest.mark.skipif(not orphan_guard(), reason="needs util-linux's setpriv")
def test_children_die_with_a_killed_launcher(tmp_path: os.PathLike[str]) -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, f"{tmp_path}/sleeper.log"],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = 0
    try:
        assert launcher.stdout is not None
        child = int(launcher.stdout.readline())
        # the guard execs the command: same pid, the command's own argv
        wait_until(lambda: argv(child) == [b"sleep", b"300"], 30, "the child's exec")
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        wait_until(lambda: not alive(child), 30, f"the orphaned child {child} to exit")
    finally:
        launcher.kill()
        launcher.wait()
        if child and alive(child):
            os.kill(child, signal.SIGKILL)


def test_no_guard_off_the_main_thread() -> None:
    # the parent-death signal follows the forking thread, which may end long before the
    # launcher does
    prefixes: list[list[str]] = []
    thread = threading.Thread(target=lambda: prefixes.append(orphan_guard()))
    thread.start()
    thread.join()
    assert prefixes == [[]]
