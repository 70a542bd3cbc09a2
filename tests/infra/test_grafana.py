"""infra/grafana's dashboard asks only for metrics a broker serves (the names Kafka's JMX
exporter gives them), and infra/compose's scrape config reaches every broker's endpoint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gregor.broker.config import BrokerConfig
from gregor.broker.metrics import Metrics
from gregor.broker.prometheus import registry
from gregor.broker.properties import load_properties
from gregor.broker.quotas import ClientQuotas
from gregor.broker.server import Broker
from gregor.protocol.apis import ApiKey

INFRA = Path(__file__).resolve().parents[2] / "infra"


def served_names() -> set[str]:
    """Every sample name a broker with some traffic, throttling and gauges serves."""
    metrics = Metrics()
    metrics.appended("t", 100, 1)
    metrics.record_request(ApiKey.PRODUCE, 0.001)
    metrics.purgatories["produce"] = []
    quotas = ClientQuotas()
    limits = {"producer_byte_rate": "1", "consumer_byte_rate": "1", "request_percentage": "0.01"}
    quotas.config_changed("clients", "c", limits)
    for api in (ApiKey.PRODUCE, ApiKey.FETCH):
        quotas.throttle("User:u", "c", api, None, 1000, 1000, 1.0)
    # The gauges a broker installs (their readers need it running: only the names count).
    broker = Broker(
        BrokerConfig.from_properties(
            {"broker.id": "0", "zookeeper.connect": "127.0.0.1:1", "log.dirs": "/none"}
        )
    )
    metrics.gauges.update(
        {name: (doc, lambda: 0) for name, (doc, _) in broker.metrics.gauges.items()}
    )
    text = generate_latest(registry(metrics, quotas)).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_dashboard_query_names_a_served_metric() -> None:
    dashboard = json.loads((INFRA / "grafana" / "gregor-brokers.json").read_text())
    served = served_names()
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bkafka_[a-z_]+", target["expr"])
    }
    assert len(asked) >= 15
    assert asked <= served, asked - served


def test_the_scrape_config_reaches_every_broker() -> None:
    config = yaml.safe_load((INFRA / "compose" / "prometheus.yml").read_text())
    targets = {t for c in config["scrape_configs"][0]["static_configs"] for t in c["targets"]}
    brokers = {p.parent.name for p in (INFRA / "compose" / "config").glob("*/server.properties")}
    assert targets == {f"{b}:9404" for b in brokers}
    for broker in brokers:
        properties = load_properties(INFRA / "compose" / "config" / broker / "server.properties")
        assert properties["metrics.prometheus.listener"] == "http://0.0.0.0:9404"
