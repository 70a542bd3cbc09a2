"""The broker's metrics for Prometheus, on `metrics.prometheus.listener` (http://host:port).

Names are those the common JMX-exporter configs give Kafka's JMX metrics (lower case, the
MBean's type and name joined, `_total` on meters), so dashboards built for Kafka work:

    kafka_server_brokertopicmetrics_{messagesin,bytesin,bytesout}_total   (and per `topic`)
    kafka_network_requestmetrics_requests_total{request}
    kafka_network_requestmetrics_totaltimems{request}      a histogram, in milliseconds
        (request: the API's name, and FetchFollower or FetchConsumer beside Fetch)
    kafka_server_replicamanager_underreplicatedpartitions
    kafka_server_replicamanager_{isrshrinks,isrexpands}_total
    kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation}
    kafka_server_{produce,fetch,request}_throttle_time_ms_total{user,client_id}
    kafka_server_{produce,fetch}_bytes_total{user,client_id}: Kafka keeps a byte-rate per
        client; a counter lets Prometheus take the rate. Like Kafka's, these exist only for
        clients a quota applies to (a generous default quota gives them for every client).
    and the gauges the broker's parts install (`Metrics.gauges`): the controller's active
    controller count and offline partitions, the coordinators' groups and transactional ids.

A scrape reads the counters the request path keeps (`gregor.broker.metrics`) and renders
them with prometheus_client's exposition code. The scrape runs on the broker's trio loop,
served by a small HTTP handler (one request per connection), so it reads the broker's state
without locks; a scrape costs the loop about a millisecond.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial

import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gregor.broker.metrics import _BUCKETS, Metrics
from gregor.broker.quotas import ClientQuotas, QuotaType

log = logging.getLogger(__name__)

MAX_REQUEST = 8192  # bytes of an HTTP request head we read
READ_TIMEOUT_S = 10.0
PURGATORIES = {"produce": "Produce", "fetch": "Fetch", "delete_records": "DeleteRecords"}


class BrokerCollector(Collector):
    def __init__(self, metrics: Metrics, quotas: ClientQuotas) -> None:
        self.metrics = metrics
        self.quotas = quotas

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        yield from self._topic_metrics()
        yield _counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks", m.isr_shrinks.count)
        yield _counter(
            "kafka_server_replicamanager_isrexpands", "ISR expansions", m.isr_expands.count
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led here with fewer in-sync replicas than replicas",
            value=m.under_replicated(),
        )
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting in each purgatory",
            labels=["delayedOperation"],
        )
        for name, waiting in m.purgatories.items():
            purgatory.add_metric([PURGATORIES.get(name, name)], len(waiting))
        yield purgatory
        yield from self._request_metrics()
        yield from self._throttle_metrics()
        for name, (doc, read) in m.gauges.items():
            yield GaugeMetricFamily(name, doc, value=read())

    def _topic_metrics(self) -> Iterator[Metric]:
        m = self.metrics
        topics = list(m.topics.items())
        for name, doc, total, per_topic in (
            ("messagesin", "Messages appended", m.messages_in.count, "messages_in"),
            ("bytesin", "Bytes appended from producers", m.bytes_in.count, "bytes_in"),
            ("bytesout", "Record bytes sent to consumers", m.bytes_out.count, "bytes_out"),
        ):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc)
            family.add_sample(f"{family.name}_total", {}, total)
            for topic, counts in topics:
                family.add_sample(
                    f"{family.name}_total", {"topic": topic}, getattr(counts, per_topic)
                )
            yield family

    def _request_metrics(self) -> Iterator[Metric]:
        latencies = sorted(self.metrics.latency.items())
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests", "Requests answered", labels=["request"]
        )
        times = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a request's arrival to its response, in milliseconds",
            labels=["request"],
        )
        for name, latency in latencies:
            requests.add_metric([name], latency.total)
            cumulative, buckets = 0, []
            for bits in range(_BUCKETS):
                cumulative += latency.all_buckets[bits]
                if bits < _BUCKETS - 1:
                    buckets.append((_ms_bound(bits), cumulative))
            buckets.append(("+Inf", cumulative))
            times.add_metric([name], buckets, latency.all_us / 1000)
        yield requests
        yield times

    def _throttle_metrics(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily] = {}

        def family(name: str, doc: str) -> CounterMetricFamily:
            found = families.get(name)
            if found is None:
                found = families[name] = CounterMetricFamily(
                    name, doc, labels=["user", "client_id"]
                )
            return found

        for sensor in self.quotas.sensors():
            kind = sensor.quota_type.metric.lower()
            family(
                f"kafka_server_{kind}_throttle_time_ms",
                f"Milliseconds of throttle given to a client by its {kind} quota",
            ).add_metric(list(sensor.tags), sensor.throttle_ms_total)
            if sensor.quota_type is not QuotaType.REQUEST:
                family(
                    f"kafka_server_{kind}_bytes",
                    f"Bytes of {kind} requests counted against a client's quota (rate(): "
                    "Kafka's byte-rate)",
                ).add_metric(list(sensor.tags), sensor.value_total)
        yield from families.values()


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _ms_bound(bits: int) -> str:
    """The upper bound of a power-of-two microsecond bucket, in milliseconds."""
    return repr(((1 << bits) - 1) / 1000 if bits else 0.0)


def registry(metrics: Metrics, quotas: ClientQuotas) -> CollectorRegistry:
    found = CollectorRegistry(auto_describe=False)
    found.register(BrokerCollector(metrics, quotas))
    return found


# -- the HTTP endpoint ------------------------------------------------------------------------


async def _answer(registry: CollectorRegistry, stream: trio.SocketStream) -> None:
    head = b""
    with trio.move_on_after(READ_TIMEOUT_S):
        while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST:
            chunk = await stream.receive_some(MAX_REQUEST)
            if not chunk:
                break
            head += chunk
    method, _, rest = head.partition(b" ")
    path = rest.partition(b" ")[0].partition(b"?")[0]
    if method not in (b"GET", b"HEAD"):
        status, body, kind = b"405 Method Not Allowed", b"", b"text/plain"
    elif path not in (b"/", b"/metrics"):
        status, body, kind = b"404 Not Found", b"", b"text/plain"
    else:
        status, body, kind = b"200 OK", generate_latest(registry), CONTENT_TYPE_LATEST.encode()
    response = (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + kind
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
    )
    try:
        await stream.send_all(response + (body if method == b"GET" else b""))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


async def _handle(registry: CollectorRegistry, stream: trio.SocketStream) -> None:
    try:
        await _answer(registry, stream)
    except OSError as exc:
        log.debug("a Prometheus scrape failed: %s", exc)
    except Exception:
        # A scrape must never cost the broker.
        log.exception("a Prometheus scrape failed")


async def serve(
    host: str,
    port: int,
    metrics: Metrics,
    quotas: ClientQuotas,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve /metrics on host:port until cancelled; started with the port bound."""
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    bound = listeners[0].socket.getsockname()[1]
    log.info("serving Prometheus metrics on http://%s:%d/metrics", host or "0.0.0.0", bound)
    async with trio.open_nursery() as nursery:
        handler = partial(_handle, registry(metrics, quotas))
        await nursery.start(partial(trio.serve_listeners, handler, listeners))
        task_status.started(bound)
