"""The configuration reference is the declarations' (never stale), and the sample
server.properties is one a broker loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gregor.broker.config import SERVER_SETTINGS, BrokerConfig, Endpoint

ROOT = Path(__file__).parents[2]
SAMPLE = ROOT / "infra" / "config" / "server.properties"


def test_configuration_reference_is_up_to_date() -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "config_reference.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr + "\n(regenerate it with `nox -s docs`)"


def test_reference_lists_every_key() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    for key in [*SERVER_SETTINGS, "retention.ms", "cleanup.policy", "bootstrap.servers", "acks"]:
        assert f"| `{key}` |" in text, key


def test_sample_server_properties_loads(caplog: pytest.LogCaptureFixture) -> None:
    config = BrokerConfig.load(SAMPLE, ["broker.id=2"])
    assert "isn't a known config" not in caplog.text
    assert config.broker_id == 2
    assert config.listeners == (Endpoint("PLAINTEXT", "0.0.0.0", 9092),)
    assert config.advertised_listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.zookeeper_connect == "127.0.0.1:2181/gregor"
    assert config.log_manager_config.log_dirs == ("/var/lib/gregor/data",)
    assert config.log_config.retention_ms == 168 * 3600 * 1000
    assert config.log_config.min_insync_replicas == 2
    assert config.default_replication_factor == 3
