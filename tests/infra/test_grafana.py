"""infra/grafana's dashboards ask only for metrics that are served: the brokers' (the names
Kafka's JMX exporter gives them), gregor-mirror's and gregor-etl's; infra/compose's scrape
config reaches every broker's and mirror's endpoint, and the ETL host's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gregor.broker.config import BrokerConfig
from gregor.broker.metrics import Metrics
from gregor.broker.prometheus import registry
from gregor.broker.properties import load_properties
from gregor.broker.quotas import ClientQuotas
from gregor.broker.server import Broker
from gregor.client import TopicPartition
from gregor.mirror.config import MirrorConfig
from gregor.mirror.metrics import FlowMetrics, now_ms
from gregor.mirror.prometheus import MirrorCollector
from gregor.protocol.apis import ApiKey
from gregor.spark.metrics import EtlCollector, EtlMetrics

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


def asked_names(dashboard: str) -> set[str]:
    panels = json.loads((INFRA / "grafana" / dashboard).read_text())["panels"]
    return {
        name
        for panel in panels
        for target in panel["targets"]
        for name in re.findall(r"\b(?:kafka|gregor)_[a-z_]+", target["expr"])
    }


def test_every_dashboard_query_names_a_served_metric() -> None:
    asked = asked_names("gregor-brokers.json")
    served = served_names()
    assert len(asked) >= 15
    assert asked <= served, asked - served


def pipeline_names() -> set[str]:
    """Every sample name a mirror's flow and an ETL run with some traffic serve."""
    flow = FlowMetrics("A->B")
    tp = TopicPartition("orders", 0)
    flow.read(tp, now_ms() - 10, now_ms(), lag=3)
    flow.delivered(tp, 1, 40, now_ms() - 10)
    flow.checkpoint_latency.add(5)
    etl = EtlMetrics(["orders"])
    etl.batch("orders", 10, 9, 1.5, 1e9, {0: 10}, {0: 12})
    etl.rejected("orders", 1)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MirrorCollector([flow]))
    registry.register(EtlCollector(etl))
    text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_pipelines_dashboard_query_names_a_served_metric() -> None:
    asked = asked_names("gregor-pipelines.json")
    served = pipeline_names()
    assert {n for n in asked if n.startswith("gregor_etl_")} and {
        n for n in asked if n.startswith("kafka_connect_")
    }
    assert asked <= served, asked - served


def test_the_scrape_config_reaches_every_broker() -> None:
    config = yaml.safe_load((INFRA / "compose" / "prometheus.yml").read_text())
    targets = {t for c in config["scrape_configs"][0]["static_configs"] for t in c["targets"]}
    brokers = {p.parent.name for p in (INFRA / "compose" / "config").glob("*/server.properties")}
    assert targets == {f"{b}:9404" for b in brokers}
    for broker in brokers:
        properties = load_properties(INFRA / "compose" / "config" / broker / "server.properties")
        assert properties["metrics.prometheus.listener"] == "http://0.0.0.0:9404"


def test_the_scrape_config_reaches_every_mirror_and_the_etl_host() -> None:
    config = yaml.safe_load((INFRA / "compose" / "prometheus.yml").read_text())
    jobs = {
        c["job_name"]: {t for s in c["static_configs"] for t in s["targets"]}
        for c in config["scrape_configs"]
    }
    mirrors = {p.parent.name for p in (INFRA / "compose" / "config").glob("*/mm2.properties")}
    assert jobs["gregor-mirror"] == {f"{m}:9108" for m in mirrors}
    for mirror in mirrors:
        properties = load_properties(INFRA / "compose" / "config" / mirror / "mm2.properties")
        assert MirrorConfig.from_properties(properties).prometheus_listener == ("0.0.0.0", 9108)
    assert jobs["gregor-etl"] == {"dc1-etl:9109"}
