"""Running the `gregor` command as users run it (the console script, in a process of its
own), and producing records to check its figures against."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gregor.client import Producer
from gregor.devcluster import LocalCluster

GREGOR = str(Path(sys.executable).parent / "gregor")


def gregor(
    *args: str, check: bool = True, timeout: float = 120, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run `gregor ARGS` with `stdin` as its input; with `check`, fail the test (showing
    stderr) on a non-zero exit."""
    done = subprocess.run(
        [GREGOR, *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"gregor {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def on(cluster: LocalCluster, *args: str) -> Any:
    """`gregor ARGS --bootstrap-server ... --json`, parsed."""
    done = gregor(*args, "--bootstrap-server", cluster.bootstrap_servers, "--json")
    return json.loads(done.stdout)


def fails(cluster: LocalCluster, *args: str) -> str:
    """Run a command that must fail; its one line of stderr."""
    done = gregor(*args, "--bootstrap-server", cluster.bootstrap_servers, check=False)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gregor: error: "), done.stderr
    return lines[0]


def produce(
    cluster: LocalCluster,
    topic: str,
    counts: dict[int, int],
    size: int = 10,
    first_timestamp: int | None = None,
) -> None:
    """`counts[p]` records of `size` bytes into each partition p, acknowledged by all; with
    `first_timestamp`, record i of each partition is stamped one second after record i-1."""
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        futures = [
            producer.produce(
                topic,
                b"%0*d" % (size, i),
                partition=p,
                timestamp=None if first_timestamp is None else first_timestamp + 1000 * i,
            )
            for p, n in counts.items()
            for i in range(n)
        ]
        producer.flush(60)
    for future in futures:
        future.result(0)
