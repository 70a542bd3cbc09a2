"""The workload (`workload.py`) run as a program on the topology's client hosts, inside
their namespaces, against a datacenter's cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gregor.devcluster import namespaces
from gregor.devcluster.netns import NetnsTopology

DATACENTER = "dc1"
CLIENT = "dc1-client"
CLIENTS = {"dc1": "dc1-client", "dc2": "dc2-client"}  # each datacenter's client host
WORKLOAD = Path(__file__).with_name("workload.py")


def workload_argv(
    topology: NetnsTopology,
    command: str,
    *args: str,
    host: str = CLIENT,
    datacenter: str = DATACENTER,
) -> list[str]:
    """`workload.py command` on a client host (by default dc1's), against a datacenter's
    cluster (by default dc1)."""
    return [
        *namespaces.exec_prefix(topology.namespace(host)),
        sys.executable,
        str(WORKLOAD),
        command,
        "--bootstrap",
        topology.bootstrap_servers(datacenter),
        *args,
    ]


def workload(
    topology: NetnsTopology, command: str, *args: str, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """`workload.py command` on dc1's client host, against dc1's cluster; its stderr to
    `log` when given."""
    argv = workload_argv(topology, command, *args)
    if log is None:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    with log.open("ab") as err:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=err)


def finish(process: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    try:
        status = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError(f"the workload's {what} did not end in {timeout} s") from None
    if status != 0:
        raise RuntimeError(f"the workload's {what} exited with status {status}")


def ends(topology: NetnsTopology, topic: str, datacenter: str = DATACENTER) -> dict[int, int]:
    """The topic's high watermarks in `datacenter`, asked from its client host ({} while
    the topic does not exist)."""
    argv = workload_argv(
        topology, "ends", "--topic", topic, host=CLIENTS[datacenter], datacenter=datacenter
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"the high watermarks of {topic} in {datacenter}: {done.stderr}")
    return {int(p): high for p, high in json.loads(done.stdout).items()}
