"""In-process metrics, logged periodically and served to Prometheus (`gregor.broker.prometheus`):
Kafka's BrokerTopicMetrics and request metrics.

- meters: messages in, bytes in and out, ISR shrinks and expands (counts and per-second
  rates over the last logging interval); messages and bytes also per topic;
- gauges: under-replicated partitions, and the requests waiting in each purgatory (Kafka's
  PurgatorySize: an operation waiting on several partitions counts once for each), read from
  the replica manager when reported;
- request latency per API: count, mean, max and an approximate 99th percentile from
  power-of-two buckets (microseconds), reset each interval; the same buckets since start
  for Prometheus' histograms. A Fetch counts under `Fetch` and also under `FetchFollower`
  or `FetchConsumer`, as Kafka's RequestChannel counts it, so replication and consumers
  are told apart;
- gauges the broker's parts install by name (the controller's, the coordinators').

Recording is a few integer additions per request or batch (never per record), cheap enough
for the request path.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sized

import trio

from gregor.protocol.apis import ApiKey, api_name

log = logging.getLogger(__name__)

_BUCKETS = 32  # 2**31 µs is more than half an hour
FETCH_FOLLOWER = "FetchFollower"  # Kafka's request metric names for the two kinds of Fetch
FETCH_CONSUMER = "FetchConsumer"
_name = functools.cache(api_name)  # looked up per request: the name built once per API


class Meter:
    __slots__ = ("_window_count", "_window_start", "count")

    def __init__(self) -> None:
        self.count = 0
        self._window_count = 0
        self._window_start = time.monotonic()

    def mark(self, n: int = 1) -> None:
        self.count += n

    def rate(self, now: float | None = None) -> float:
        """Per second since the window started; `roll` starts the next window."""
        now = time.monotonic() if now is None else now
        elapsed = max(now - self._window_start, 1e-9)
        return (self.count - self._window_count) / elapsed

    def roll(self, now: float) -> None:
        self._window_count = self.count
        self._window_start = now


class Latency:
    """Request latencies of one API over the current window."""

    __slots__ = ("all_buckets", "all_us", "buckets", "count", "max_us", "total", "total_us")

    def __init__(self) -> None:
        self.total = 0  # since start
        self.all_us = 0  # since start
        self.all_buckets = [0] * _BUCKETS  # since start
        self.count = 0
        self.total_us = 0
        self.max_us = 0
        self.buckets = [0] * _BUCKETS

    def record(self, seconds: float) -> None:
        us = int(seconds * 1_000_000)
        self.total += 1
        self.count += 1
        self.total_us += us
        self.all_us += us
        if us > self.max_us:
            self.max_us = us
        bucket = min(us.bit_length(), _BUCKETS - 1)
        self.buckets[bucket] += 1
        self.all_buckets[bucket] += 1

    def percentile(self, fraction: float) -> int:
        """An upper bound of the given percentile in microseconds (a power of two)."""
        wanted = self.count * fraction
        seen = 0
        for bits, n in enumerate(self.buckets):
            seen += n
            if seen >= wanted and n:
                return (1 << bits) - 1 if bits else 0
        return 0

    def reset(self) -> None:
        self.count = self.total_us = self.max_us = 0
        self.buckets = [0] * _BUCKETS


class TopicCounts:
    """One topic's BrokerTopicMetrics since start."""

    __slots__ = ("bytes_in", "bytes_out", "messages_in")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0


Gauge = Callable[[], float]


class Metrics:
    def __init__(self) -> None:
        self.messages_in = Meter()
        self.bytes_in = Meter()
        self.bytes_out = Meter()
        self.isr_shrinks = Meter()
        self.isr_expands = Meter()
        self.produce_requests = Meter()
        self.fetch_requests = Meter()
        self.failed_produce_requests = Meter()
        self.latency: dict[str, Latency] = {}  # by request name: api_name, FetchFollower...
        # The replica manager installs this: the number of under-replicated partitions led here.
        self.under_replicated: Callable[[], int] = lambda: 0
        # The replica manager registers its purgatories here, by name: "fetch", "produce", ...
        self.purgatories: dict[str, Sized] = {}
        self.topics: dict[str, TopicCounts] = {}
        # Installed by the broker's parts: Prometheus name -> (help, read it now).
        self.gauges: dict[str, tuple[str, Gauge]] = {}

    def _topic(self, topic: str) -> TopicCounts:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = TopicCounts()
        return counts

    def appended(self, topic: str, size: int, messages: int) -> None:
        """A batch appended from a producer: bytes in, and its new messages."""
        self.bytes_in.mark(size)
        self.messages_in.mark(messages)
        counts = self._topic(topic)
        counts.bytes_in += size
        counts.messages_in += messages

    def sent(self, topic: str, size: int) -> None:
        """Record bytes of a topic sent to a consumer."""
        self.bytes_out.mark(size)
        self._topic(topic).bytes_out += size

    def record_request(self, api_key: int, seconds: float, from_follower: bool = False) -> None:
        """A request answered `seconds` after it arrived; `from_follower` tells, for a
        Fetch, whether a replica (FetchFollower) or a consumer (FetchConsumer) sent it."""
        self._latency(_name(api_key)).record(seconds)
        if api_key == ApiKey.FETCH:
            self._latency(FETCH_FOLLOWER if from_follower else FETCH_CONSUMER).record(seconds)

    def _latency(self, name: str) -> Latency:
        latency = self.latency.get(name)
        if latency is None:
            latency = self.latency[name] = Latency()
        return latency

    def report(self) -> str:
        """One line of every metric, and start the next window."""
        now = time.monotonic()
        meters = {
            "messages_in": self.messages_in,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "isr_shrinks": self.isr_shrinks,
            "isr_expands": self.isr_expands,
        }
        parts = [f"{name}={m.count} ({m.rate(now):.1f}/s)" for name, m in meters.items()]
        parts.append(f"under_replicated_partitions={self.under_replicated()}")
        parts += [f"{name}_purgatory_size={len(p)}" for name, p in self.purgatories.items()]
        for name, latency in sorted(self.latency.items()):
            if latency.count:
                mean_ms = latency.total_us / latency.count / 1000
                p99_ms = latency.percentile(0.99) / 1000
                parts.append(
                    f"{name}: n={latency.count} mean={mean_ms:.2f}ms "
                    f"p99<={p99_ms:.1f}ms max={latency.max_us / 1000:.1f}ms"
                )
            latency.reset()
        for m in meters.values():
            m.roll(now)
        return "; ".join(parts)

    async def log_periodically(self, interval: float) -> None:
        while True:
            await trio.sleep(interval)
            log.info("metrics: %s", self.report())
