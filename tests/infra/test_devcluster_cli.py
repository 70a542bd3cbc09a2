"""The launcher's command line, as the README's main job runs it: a cluster that produces and
reads back its sample, and a Ctrl-C that stops every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from gregor.devcluster import free_port, wait_until


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it exited meanwhile
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def cluster_command(tmp_path: Path) -> tuple[list[str], int, int]:
    port, zookeeper_port = free_port(), free_port()
    command = [sys.executable, "-m", "gregor.devcluster", "--dir", str(tmp_path), "--brokers"]
    command += ["1", "--port", str(port), "--zookeeper-port", str(zookeeper_port)]
    return command, port, zookeeper_port


def read_until_running(stdout: IO[str]) -> str:
    lines: list[str] = []
    for line in stdout:
        lines.append(line)
        if line.startswith("running; press Ctrl-C"):
            break
    output = "".join(lines)
    assert "running; press Ctrl-C" in output, output
    return output


def kill_leftovers(pids: set[int]) -> None:
    for pid in pids:  # a failed stop leaves nothing behind either
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_cluster_command_runs_until_ctrl_c_and_stops_every_process(tmp_path: Path) -> None:
    command, port, zookeeper_port = cluster_command(tmp_path)
    cli = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    started: set[int] = set()
    try:
        assert cli.stdout is not None
        output = read_until_running(cli.stdout)
        assert "demo-0 @ 0: hello from gregor #0" in output
        assert f"bootstrap servers: 127.0.0.1:{port}" in output
        assert f"zookeeper:         127.0.0.1:{zookeeper_port}" in output
        started = children(cli.pid)
        assert len(started) == 2, output  # ZooKeeper and the broker
        cli.send_signal(signal.SIGINT)
        rest, _ = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        kill_leftovers(started)
    assert cli.returncode == 0, rest
    assert rest.rstrip().endswith("stopped"), rest
    wait_until(lambda: not any(alive(pid) for pid in started), 10, "every process to exit")
    assert (tmp_path / "broker-0" / "server.properties").exists()


# What `nox -s cluster` does on SIGTERM: it exits at once, without passing the signal on.
RUNNER = """
import subprocess, sys, time
cli = subprocess.Popen(sys.argv[1:], stderr=subprocess.STDOUT)
print(cli.pid, flush=True)
time.sleep(600)
"""


def test_the_cluster_stops_when_what_started_it_dies(tmp_path: Path) -> None:
    command, _, _ = cluster_command(tmp_path)
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, *command], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    cli, started = 0, set()
    try:
        assert runner.stdout is not None
        cli = int(runner.stdout.readline())
        output = read_until_running(runner.stdout)
        started = children(cli)
        assert len(started) == 2, output
        runner.kill()  # as abrupt as it gets: the launcher is told by the parent-death signal
        runner.wait()
        rest = runner.stdout.read()  # the launcher's end of the pipe closes when it exits
        assert rest.rstrip().endswith("stopped"), rest
        wait_until(lambda: not any(alive(pid) for pid in {cli, *started}), 30, "every exit")
    finally:
        runner.kill()
        runner.wait()
        kill_leftovers({cli, *started} - {0})
