"""A broker process whose broker.id is already registered by a live broker refuses to start,
saying why; the running broker is unaffected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gregor.devcluster import BrokerProcess, LocalCluster


def test_a_duplicate_broker_id_fails_startup_with_a_clear_message(
    cluster_factory: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    cluster = cluster_factory(1)
    running = cluster.broker(0)
    twin = BrokerProcess(0, tmp_path / "twin", cluster.zookeeper_connect)
    twin.launch()
    try:
        status = twin.wait(60)
    finally:
        twin.kill()
    assert status == 1
    log = twin.log_tail(6000)
    assert "/brokers/ids/0 is already registered by another live session" in log
    assert "same broker.id" in log
    assert running.is_running()
