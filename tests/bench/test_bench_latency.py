"""bench_latency's own logic, without a cluster: the percentiles it prints, and the /proc
counters it reads beside them."""

from __future__ import annotations

import http.server
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

from prometheus_client import generate_latest

from gregor.broker.metrics import Metrics
from gregor.broker.prometheus import registry
from gregor.broker.quotas import ClientQuotas
from gregor.protocol.apis import ApiKey

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


def test_the_goals_verdict_is_on_one_run_or_the_median_of_several() -> None:
    assert bench_latency.verdict("batch", [4.2]) == (
        "goal p99 <= 5 ms at 10,000/s, acks=all, batch: 4.20 ms, met"
    )
    assert bench_latency.verdict("other", [5.01]).endswith(": 5.01 ms, not met")
    # The median decides, not the best or the worst run; the spread and the count within
    # the goal are shown.
    assert bench_latency.verdict("batch", [9.0, 4.0, 4.5, 6.0, 4.9]) == (
        "goal p99 <= 5 ms at 10,000/s, acks=all, batch: "
        "median 4.90 ms over 5 runs (4.00-9.00, 3 within the goal), met"
    )
    assert bench_latency.verdict("batch", [4.0, 6.2, 5.8, 4.6]).endswith(
        "median 5.20 ms over 4 runs (4.00-6.20, 2 within the goal), not met"
    )


def test_the_proc_counters_never_go_back() -> None:
    me = [os.getpid()]
    readings = [
        (
            bench_broker.cpu_seconds(me),
            bench_broker.run_queue_seconds(me),
            bench_broker.machine_busy_seconds(),
            bench_broker.preemptions(me),
        )
        for _ in range(2)
    ]
    assert all(value >= 0 for value in readings[0])
    assert all(b >= a for a, b in zip(readings[0], readings[1], strict=True))


def test_a_scheduling_policy_is_inherited_by_the_processes_started_under_it() -> None:
    """What the bench relies on to put ZooKeeper, the brokers and both clients under one
    policy: set on the starting thread, inherited by a child, and undone after."""
    before = os.sched_getscheduler(0)
    asked = [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"]
    for name, policy in bench_latency.POLICIES.items():
        with bench_latency.scheduled(name):
            assert os.sched_getscheduler(0) == policy
            child = subprocess.run(asked, capture_output=True, text=True, check=True)
            assert int(child.stdout) == policy
        assert os.sched_getscheduler(0) == before


def test_requests_answered_sums_the_brokers_prometheus_counters_by_request() -> None:
    """Read from a real exposition of the broker's registry, served over HTTP twice (two
    brokers): a Fetch counts as Fetch and as FetchFollower or FetchConsumer."""
    metrics = Metrics()
    for _ in range(4):
        metrics.record_request(ApiKey.PRODUCE, 0.001)
    for follower in (True, True, True, False, False):
        metrics.record_request(ApiKey.FETCH, 0.002, follower)
    body = generate_latest(registry(metrics, ClientQuotas()))

    class Exposition(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exposition)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        answered = bench_latency.requests_answered([url, url])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert answered["Produce"] == 8
    assert answered["Fetch"] == 10
    assert answered["FetchFollower"] == 6
    assert answered["FetchConsumer"] == 4
    line = bench_latency.request_rates(answered, 80, 2.0)
    assert line.split(": ", 1)[1] == (
        "Produce 4/s, FetchFollower 3/s, FetchConsumer 2/s; 10.0 records a Produce"
    )
