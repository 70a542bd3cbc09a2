"""bench_peers' own logic, without any peer: the batches it sends, its ratios, and that
docs/performance.md shows the figures bench/results/peers.json holds (the last run's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_peers  # noqa: E402


def test_batches_send_every_message_in_batches_of_at_most_the_size() -> None:
    assert list(bench_peers.batches(120, 50)) == [50, 50, 20]
    assert list(bench_peers.batches(3, 1)) == [1, 1, 1]
    assert list(bench_peers.batches(0, 50)) == []


def test_ratios_are_each_gregor_client_over_each_peer() -> None:
    results = {
        "gregor/confluent": {"produce 1": 4000.0, "produce 50": 90_000.0, "consume": 200_000.0},
        "rabbitmq": {"produce 1": 2000.0, "produce 50": 30_000.0, "consume": 40_000.0},
        "nats": {"produce 1": 8000.0, "produce 50": 45_000.0, "consume": 100_000.0},
    }
    assert bench_peers.ratios(results) == {
        "gregor/confluent": {
            "rabbitmq": {"produce 1": 2.0, "produce 50": 3.0, "consume": 5.0},
            "nats": {"produce 1": 0.5, "produce 50": 2.0, "consume": 2.0},
        }
    }
    text = bench_peers.table(results)
    assert "vs rabbitmq" in text and "consume   5.00x [4] ok" in text
    assert "consume   2.00x [4] MISSED" in text


def test_performance_doc_shows_the_recorded_run() -> None:
    recorded = ROOT / "bench" / "results" / "peers.json"
    if not recorded.exists():
        pytest.skip("no bench_peers run recorded yet")
    record = json.loads(recorded.read_text())
    doc = (ROOT / "docs" / "performance.md").read_text()
    assert bench_peers.markdown(record) in doc, "paste bench_peers' markdown into the doc"
    assert "bench/results/peers.png" in doc or "../bench/results/peers.png" in doc
