"""Scraping a broker's Prometheus endpoint (metrics.prometheus.listener) in tests."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from gregor.devcluster import BrokerProcess
from gregor_testing.cluster import wait_for_log

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def endpoint(broker: BrokerProcess) -> str:
    line = wait_for_log(broker, "serving Prometheus metrics on", 0)
    found = re.search(r"serving Prometheus metrics on (http://\S+)", line)
    assert found is not None, line
    return found[1]


def scrape(broker: BrokerProcess) -> Samples:
    with urllib.request.urlopen(endpoint(broker), timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)
