"""The in-process metrics and the line they are logged as."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gregor.broker.metrics import Latency, Metrics
from gregor.broker.prometheus import registry
from gregor.broker.quotas import ClientQuotas
from gregor.protocol.apis import ApiKey


def test_report_has_every_meter_the_gauge_and_latencies_then_starts_a_new_window() -> None:
    metrics = Metrics()
    metrics.messages_in.mark(1000)
    metrics.bytes_in.mark(100_000)
    metrics.bytes_out.mark(50_000)
    metrics.isr_shrinks.mark()
    metrics.isr_expands.mark(2)
    metrics.under_replicated = lambda: 3
    metrics.purgatories["fetch"] = [object(), object()]
    for ms in (1, 2, 3, 40):
        metrics.record_request(ApiKey.PRODUCE, ms / 1000)
    report = metrics.report()
    for part in (
        "messages_in=1000 (",
        "bytes_in=100000 (",
        "bytes_out=50000 (",
        "isr_shrinks=1 (",
        "isr_expands=2 (",
        "under_replicated_partitions=3",
        "fetch_purgatory_size=2",
        "Produce: n=4 mean=11.50ms",
        "max=40.0ms",
    ):
        assert part in report, (part, report)
    assert "/s)" in report
    # The next window starts empty for latencies; counts are cumulative.
    again = metrics.report()
    assert "Produce:" not in again
    assert "messages_in=1000 (0.0/s)" in again


def test_latency_percentile_is_an_upper_bound() -> None:
    latency = Latency()
    for us in [100] * 99 + [100_000]:
        latency.record(us / 1_000_000)
    assert 100 <= latency.percentile(0.5) < 200
    assert latency.percentile(0.99) < 200
    assert latency.percentile(1.0) >= 100_000


def test_prometheus_exposition_has_kafkas_jmx_exporter_names() -> None:
    metrics = Metrics()
    metrics.appended("orders", 5000, 10)
    metrics.sent("orders", 2000)
    metrics.isr_shrinks.mark()
    metrics.purgatories["produce"] = [object()]
    metrics.gauges["kafka_controller_kafkacontroller_activecontrollercount"] = ("active", lambda: 1)
    for ms in (0.5, 3, 3):
        metrics.record_request(ApiKey.FETCH, ms / 1000)
    quotas = ClientQuotas()
    quotas.config_changed("clients", "c", {"producer_byte_rate": "10"})
    throttle, _ = quotas.throttle("User:ANONYMOUS", "c", ApiKey.PRODUCE, None, 1000, 10, 0.0)
    text = generate_latest(registry(metrics, quotas)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", ())] == 10
    assert (
        samples[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "orders"),))] == 5000
    )
    assert (
        samples[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "orders"),))] == 2000
    )
    assert samples[("kafka_server_replicamanager_isrshrinks_total", ())] == 1
    assert samples[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    purgatory = (
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        (("delayedOperation", "Produce"),),
    )
    assert samples[purgatory] == 1
    fetch = (("request", "Fetch"),)
    assert samples[("kafka_network_requestmetrics_requests_total", fetch)] == 3
    assert samples[("kafka_network_requestmetrics_totaltimems_count", fetch)] == 3
    assert samples[("kafka_network_requestmetrics_totaltimems_sum", fetch)] == 6.5
    # As Kafka's RequestChannel, a consumer's Fetch counts as FetchConsumer too.
    consumer = (("request", "FetchConsumer"),)
    assert samples[("kafka_network_requestmetrics_requests_total", consumer)] == 3
    assert samples[("kafka_network_requestmetrics_totaltimems_sum", consumer)] == 6.5
    follower = (("request", "FetchFollower"),)
    assert ("kafka_network_requestmetrics_requests_total", follower) not in samples
    # 0.5 ms falls in the bucket up to 0.511 ms, 3 ms in the one up to 4.095 ms.
    assert (
        samples[("kafka_network_requestmetrics_totaltimems_bucket", (("le", "0.511"), *fetch))] == 1
    )
    assert (
        samples[("kafka_network_requestmetrics_totaltimems_bucket", (("le", "4.095"), *fetch))] == 3
    )
    client = (("client_id", "c"), ("user", ""))
    assert throttle > 0
    assert samples[("kafka_server_produce_throttle_time_ms_total", client)] == throttle
    assert samples[("kafka_server_produce_bytes_total", client)] == 1000
