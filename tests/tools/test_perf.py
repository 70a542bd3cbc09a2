"""`gregor perf produce|consume` on a terminal (a PTY): the live progress bar shows, then
Kafka's final statistics lines, with the counts produced and consumed."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess

from tools.helpers import GREGOR

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

RECORDS = 20_000


def on_terminal(*args: str, timeout: float = 180) -> str:
    """Run `gregor ARGS` with a PTY as its stdout and stderr; everything it wrote."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    process = subprocess.Popen([GREGOR, *args], stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    out = bytearray()
    try:
        while True:
            ready, _, _ = select.select([controller], [], [], timeout)
            assert ready, f"gregor {args} wrote nothing for {timeout}s"
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert process.wait(timeout) == 0, out.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(controller)
    return out.decode(errors="replace")


def test_produce_then_consume_on_a_terminal(tools_cluster: LocalCluster) -> None:
    topic = unique_topic("cli-perf")
    create_topic(tools_cluster, topic, partitions=3, replication_factor=3)
    servers = tools_cluster.bootstrap_servers

    produced = on_terminal(
        "perf", "produce", "--bootstrap-server", servers, "--topic", topic,
        "--num-records", str(RECORDS), "--record-size", "100", "--producer-props", "acks=all",
    )  # fmt: skip
    assert "━" in produced  # the bar
    assert f"{RECORDS}/{RECORDS}" in produced and "records/s" in produced
    final = re.search(
        rf"{RECORDS} records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
        r"[\d.]+ ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th\.",
        produced,
    )
    assert final, produced
    p50, p95, p99, p999 = map(int, final.groups())
    assert p50 <= p95 <= p99 <= p999

    consumed = on_terminal(
        "perf", "consume", "--bootstrap-server", servers, "--topic", topic,
        "--messages", str(RECORDS),
    )  # fmt: skip
    assert "━" in consumed and f"{RECORDS}/{RECORDS}" in consumed
    header = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
    assert header in consumed
    figures = consumed.split(header)[1].strip().splitlines()[0].split(", ")
    assert int(figures[4]) == RECORDS
    assert abs(float(figures[2]) - RECORDS * 100 / 1024 / 1024) < 0.001
