"""bench_round, short: the echo floor it divides by, and a few rounds on a real cluster
(the nox session bench_round runs thousands)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_round  # noqa: E402


def test_the_echo_floor_is_the_servers_cpu_per_echoed_request() -> None:
    # echo_floor checks each answer is the request's bytes, and raises otherwise.
    floor = bench_round.echo_floor(2000)
    assert 0 <= floor < 1  # seconds per request, from /proc ticks (0 if under one tick)


def test_a_few_rounds_are_measured_on_each_broker_leader_first() -> None:
    latency, spent = bench_round.rounds(50, filler=2)
    assert [role for role, _ in spent] == ["leader", "follower 1", "follower 2"]
    assert all(seconds >= 0 for _, seconds in spent)
    assert 0 < latency["p50"] <= latency["p99"] <= latency["max"]
