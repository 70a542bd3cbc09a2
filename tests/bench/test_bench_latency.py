"""bench_latency's own logic, without a cluster: the percentiles it prints, and the /proc
counters it reads beside them."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_broker  # noqa: E402
import bench_latency  # noqa: E402


def test_percentiles_are_of_nanoseconds_in_milliseconds() -> None:
    values = [n * 1_000_000 for n in range(1, 1001)]  # 1 .. 1000 ms, shuffled below
    figures = bench_latency.percentiles(values[500:] + values[:500])
    assert figures == {"p50": 501.0, "p99": 991.0, "p99.9": 1000.0, "max": 1000.0}
    assert bench_latency.percentiles([7_000_000]) == {
        "p50": 7.0,
        "p99": 7.0,
        "p99.9": 7.0,
        "max": 7.0,
    }
    empty = bench_latency.percentiles([])
    assert math.isnan(empty["p99"]) and empty["max"] == 0.0


def test_the_proc_counters_never_go_back() -> None:
    me = [os.getpid()]
    readings = [
        (
            bench_broker.cpu_seconds(me),
            bench_broker.run_queue_seconds(me),
            bench_broker.machine_busy_seconds(),
        )
        for _ in range(2)
    ]
    assert all(value >= 0 for value in readings[0])
    assert all(b >= a for a, b in zip(readings[0], readings[1], strict=True))
