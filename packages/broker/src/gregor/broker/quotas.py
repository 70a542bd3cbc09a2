"""Client quotas, as Kafka enforces them: byte rates and request time per (user, client-id).

Three quotas, each under its Kafka config key:
- `producer_byte_rate`: bytes per second of Produce requests (a request's whole size, as
  Kafka counts it);
- `consumer_byte_rate`: bytes per second of Fetch responses to consumers. Follower fetches
  (replication) never count and are never throttled;
- `request_percentage`: the share of the broker's time the client's requests take, in
  percent. Kafka counts the time of its network and request handler threads, 100 per
  thread. Gregor has one event loop, so 100 is the whole loop: a request's time is the loop
  time spent on it, from its frame decoded to its response encoded, without the time it
  waits in a purgatory (a Fetch long poll, a Produce waiting for the ISR). Inter-broker
  requests (follower fetches, LeaderAndIsr, ...) are exempt, as Kafka exempts cluster actions.
  (`controller_mutation_rate` is accepted and stored, but not enforced.)

Quotas live in ZooKeeper with Kafka's layout: `/config/users/<user>`,
`/config/clients/<client-id>`, `/config/users/<user>/clients/<client-id>`, `<default>` for
the default entity at either level (names sanitized as Kafka does). Every broker applies a
change through `/config/changes` (`gregor.broker.zk.config_changes`). For each quota a
client's quota is the first that exists, most specific first (Kafka's precedence):

    1 users/<user>/clients/<client-id>       5 users/<default>/clients/<default>
    2 users/<user>/clients/<default>         6 users/<default>
    3 users/<user>                           7 clients/<client-id>
    4 users/<default>/clients/<client-id>    8 clients/<default>

The quota that applies also says who shares the rate: a user quota (3, 6) is shared by all
the user's client ids, a client-id quota (7, 8) by every user of that client id, and a
(user, client-id) quota is per pair. A default quota applies to each user (or client id)
apart: `<default>` is not one shared bucket.

A quota is enforced with a token bucket (Kafka's for controller mutations, KIP-599): it
fills at the quota's rate up to a burst of `quota.window.num` x `quota.window.size.seconds`
seconds' worth (11 s by default, what Kafka's windowed rate lets a new client send at once),
and each request takes what it used. Below zero the client is over its quota, by the time
the bucket takes to refill to zero. Kafka measures byte rates with a windowed Rate instead,
whose samples expire a second at a time: a burst then comes back every window (simulated
with Kafka's formulas, a client's rate over 20 s swings between 0.6x and 1.1x its quota),
where the bucket holds the rate at the quota once the burst is spent.

When a request takes a client over its quota the broker still answers at once, with
`throttle_time_ms` set to that refill time, and stops reading from the connection for that
long (KIP-219: clients delay their next request themselves; older ones are held back by the
muted socket). A Fetch that would go over is answered empty, its bytes not counted. The
request quota's throttle is capped at one window, as Kafka caps it.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from gregor.broker.metrics import Metrics
from gregor.broker.security.scram_credentials import user_entity as sanitize
from gregor.broker.zk import znodes
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.fetch import FetchResponse

log = logging.getLogger(__name__)

DEFAULT: Final = znodes.DEFAULT_ENTITY
USER: Final = "user"
CLIENT_ID: Final = "client-id"
IDLE_SENSOR_S = 3600.0  # a client's rates are forgotten after an hour without requests


class QuotaType(enum.Enum):
    PRODUCE = "producer_byte_rate"
    FETCH = "consumer_byte_rate"
    REQUEST = "request_percentage"

    @property
    def metric(self) -> str:
        """Kafka's metric group of this quota (`kafka.server:type=Produce`, ...)."""
        return {"producer_byte_rate": "Produce", "consumer_byte_rate": "Fetch"}.get(
            self.value, "Request"
        )


# Every key a quota entity may hold, and whether its value must be a whole number.
QUOTA_KEYS: Final[Mapping[str, bool]] = {
    QuotaType.PRODUCE.value: True,
    QuotaType.FETCH.value: True,
    QuotaType.REQUEST.value: False,
    "controller_mutation_rate": False,
}

# Requests between brokers: Kafka's cluster actions, never throttled.
EXEMPT_APIS: Final = frozenset(
    {
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.WRITE_TXN_MARKERS,
    }
)

# (user, client-id) of a configured entity, as sanitized in ZooKeeper: None where the
# entity does not name that level, DEFAULT for `<default>`.
Entity = tuple[str | None, str | None]
# (user, client-id) a rate is kept for: "" where the quota does not tell them apart.
Tags = tuple[str, str]


def entity_of(entity_type: str, name: str) -> Entity | None:
    """The entity of a /config/<entity_type>/<name> znode; None if it holds no quotas."""
    if entity_type == znodes.CONFIG_CLIENTS and "/" not in name:
        return None, name
    if entity_type == znodes.CONFIG_USERS:
        user, slash, rest = name.partition("/")
        if not slash:
            return user, None
        kind, slash, client = rest.partition("/")
        if kind == znodes.CONFIG_CLIENTS and slash and client and "/" not in client:
            return user, client
    return None


def entity_path(entity: Entity) -> tuple[str, str]:
    """(entity type, name) of an entity's znode, the inverse of `entity_of`."""
    user, client = entity
    if user is None:
        assert client is not None
        return znodes.CONFIG_CLIENTS, client
    if client is None:
        return znodes.CONFIG_USERS, user
    return znodes.CONFIG_USERS, f"{user}/{znodes.CONFIG_CLIENTS}/{client}"


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quotas in an entity's config (a user's also holds its SCRAM credentials)."""
    out = {}
    for key, text in config.items():
        if key in QUOTA_KEYS:
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if finite_positive(value):
                out[key] = value
            else:
                log.warning("ignoring quota %s=%r: not a positive number", key, text)
    return out


def user_of(principal: str) -> str:
    """The user name of a principal ("User:alice" -> "alice"), sanitized."""
    return sanitize(principal.partition(":")[2] or principal)


class TokenBucket:
    """What a client may still use now: filled at the quota's rate up to a burst of
    `burst_s` seconds' worth (KIP-599's token bucket), emptied by what the client uses."""

    __slots__ = ("_last", "burst_s", "tokens")

    def __init__(self, burst_s: float, rate: float, now: float) -> None:
        self.burst_s = burst_s
        self.tokens = burst_s * rate  # a new client starts with its burst, as in Kafka
        self._last = now

    def record(self, value: float, rate: float, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._last = now
        self.tokens = min(self.burst_s * rate, self.tokens + elapsed * rate) - value

    def throttle_s(self, rate: float) -> float:
        """How long until the client is within its quota again."""
        return -self.tokens / rate if self.tokens < 0 else 0.0


@attrs.define(slots=True, eq=False)
class Sensor:
    """The quota one rate of requests is held to, and the throttling it caused."""

    quota_type: QuotaType
    tags: Tags
    bucket: TokenBucket
    bound: float
    last_used: float = 0.0
    throttle_ms_total: int = 0
    throttled: int = 0
    value_total: float = 0.0  # all ever counted: bytes, or percent-seconds of the loop

    def record(self, value: float, now: float) -> int:
        """Count `value`; the throttle in ms it calls for (0 within the quota)."""
        self.last_used = now
        self.value_total += value
        self.bucket.record(value, self.bound, now)
        throttle = self.bucket.throttle_s(self.bound)
        return max(1, round(throttle * 1000)) if throttle > 0 else 0


class ClientQuotas:
    """Every quota configured, the rates of the clients they apply to, and the throttling."""

    def __init__(self, samples: int = 11, window_s: float = 1.0) -> None:
        self.samples = samples
        self.window_s = window_s
        self.configs: dict[Entity, dict[str, float]] = {}
        self._enabled: set[QuotaType] = set()
        # (quota type, sanitized user, client id) -> the sensor that applies, None if none.
        self._resolved: dict[tuple[QuotaType, str, str], Sensor | None] = {}
        self._sensors: dict[tuple[QuotaType, Tags], Sensor] = {}
        self._next_sweep = 0.0

    @property
    def enabled(self) -> bool:
        return bool(self._enabled)

    def config_changed(self, entity_type: str, name: str, config: Mapping[str, str]) -> None:
        """A user's or client's dynamic config changed (or was read at start)."""
        entity = entity_of(entity_type, name)
        if entity is None:
            return
        values = quota_values(config)
        if values == self.configs.get(entity, {}):
            return
        if values:
            self.configs[entity] = values
        else:
            self.configs.pop(entity, None)
        log.info("quotas of %s: %s", _describe(entity), values or "none")
        self._enabled = {t for t in QuotaType for q in self.configs.values() if t.value in q}
        # New bounds for the rates kept; which quota applies to whom is looked up afresh.
        self._resolved.clear()
        for key, sensor in list(self._sensors.items()):
            bound = self._bound(sensor.quota_type, sensor.tags)
            if bound is None:
                del self._sensors[key]
            else:
                sensor.bound = bound

    # -- which quota applies ----------------------------------------------------------------

    def _lookup(self, quota_type: QuotaType, user: str, client: str) -> tuple[Tags, float] | None:
        """The quota of (user, client) by Kafka's precedence, and the tags sharing it."""
        key, configs = quota_type.value, self.configs
        for entity, tags in (
            ((user, client), (user, client)),
            ((user, DEFAULT), (user, client)),
            ((user, None), (user, "")),
            ((DEFAULT, client), (user, client)),
            ((DEFAULT, DEFAULT), (user, client)),
            ((DEFAULT, None), (user, "")),
            ((None, client), ("", client)),
            ((None, DEFAULT), ("", client)),
        ):
            found = configs.get(entity)
            if found is not None and key in found:
                return tags, found[key]
        return None

    def _bound(self, quota_type: QuotaType, tags: Tags) -> float | None:
        """The quota a rate kept under these tags is checked against now (Kafka's lookup
        by metric tags: the entities that give a rate exactly these tags)."""
        user, client = tags
        if user and client:
            entities: list[Entity] = [(user, client), (user, DEFAULT), (DEFAULT, client)]
            entities.append((DEFAULT, DEFAULT))
        elif user:
            entities = [(user, None), (DEFAULT, None)]
        else:
            entities = [(None, client), (None, DEFAULT)]
        for entity in entities:
            found = self.configs.get(entity)
            if found is not None and quota_type.value in found:
                return found[quota_type.value]
        return None

    def sensor(self, quota_type: QuotaType, user: str, client_id: str) -> Sensor | None:
        """The rate a request of (sanitized user, client id) counts in, if a quota applies."""
        if quota_type not in self._enabled:
            return None
        key = (quota_type, user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        found = self._lookup(quota_type, user, sanitize(client_id))
        sensor = None
        if found is not None:
            tags, bound = found
            sensor = self._sensors.get((quota_type, tags))
            if sensor is None:
                bucket = TokenBucket(self.samples * self.window_s, bound, time.monotonic())
                sensor = self._sensors[(quota_type, tags)] = Sensor(quota_type, tags, bucket, bound)
        self._resolved[key] = sensor
        return sensor

    # -- recording --------------------------------------------------------------------------

    def record(self, quota_type: QuotaType, user: str, client_id: str, value: float) -> int:
        """Count `value` against the quota of (user, client id); the throttle it calls for."""
        sensor = self.sensor(quota_type, user, client_id)
        if sensor is None:
            return 0
        now = time.monotonic()
        throttle = sensor.record(value, now)
        if quota_type is QuotaType.REQUEST:
            throttle = min(throttle, round(self.window_s * 1000))
        if now >= self._next_sweep:
            self._sweep(now)
        return throttle

    def unrecord(self, quota_type: QuotaType, user: str, client_id: str, value: float) -> None:
        """Take back what `record` counted (a Fetch answered empty because it was over)."""
        sensor = self.sensor(quota_type, user, client_id)
        if sensor is not None:
            sensor.bucket.tokens += value
            sensor.value_total -= value

    def throttled(self, quota_type: QuotaType, user: str, client_id: str, ms: int) -> None:
        """A response went out with this throttle (for the per-client throttle metrics)."""
        sensor = self.sensor(quota_type, user, client_id)
        if sensor is not None:
            sensor.throttle_ms_total += ms
            sensor.throttled += 1

    def _sweep(self, now: float) -> None:
        """Forget the rates of clients gone quiet (client ids may be made up per run)."""
        self._next_sweep = now + 60.0
        idle = [k for k, s in self._sensors.items() if now - s.last_used > IDLE_SENSOR_S]
        if idle:
            for key in idle:
                del self._sensors[key]
            self._resolved.clear()

    def sensors(self) -> Iterator[Sensor]:
        return iter(list(self._sensors.values()))

    # -- the network layer's hook -----------------------------------------------------------

    def throttle(
        self,
        principal: str,
        client_id: str,
        api_key: int,
        request: Any,
        request_size: int,
        response_size: int,
        busy_s: float,
    ) -> tuple[int, QuotaType | None]:
        """The throttle of one answered request (0: none), and the byte quota it came from
        when a Fetch response must go out empty instead."""
        if api_key in EXEMPT_APIS or (
            api_key == ApiKey.FETCH and getattr(request, "replica_id", -1) >= 0
        ):
            return 0, None
        user = user_of(principal)
        bandwidth, over = 0, None
        if api_key == ApiKey.PRODUCE:
            bandwidth = self.record(QuotaType.PRODUCE, user, client_id, request_size)
            over = QuotaType.PRODUCE if bandwidth else None
        elif api_key == ApiKey.FETCH:
            bandwidth = self.record(QuotaType.FETCH, user, client_id, response_size)
            if bandwidth:
                self.unrecord(QuotaType.FETCH, user, client_id, response_size)
                over = QuotaType.FETCH
        # Percent-seconds: their rate per second is the percentage of the loop.
        request_ms = self.record(QuotaType.REQUEST, user, client_id, busy_s * 100)
        if request_ms:
            self.throttled(QuotaType.REQUEST, user, client_id, request_ms)
        if over is not None:
            self.throttled(over, user, client_id, bandwidth)
        return max(bandwidth, request_ms), over


def throttled_response(
    response: Any, throttle_ms: int, over: QuotaType | None, metrics: Metrics
) -> Any:
    """The response that goes out with this throttle: a Fetch over its quota is answered
    empty (its records not counted, nor sent), any other keeps its body."""
    if over is QuotaType.FETCH and isinstance(response, FetchResponse):
        for topic in response.responses:
            for partition in topic.partitions:
                if partition.records is not None:
                    metrics.sent(topic.topic, -len(partition.records))
        return FetchResponse(throttle_time_ms=throttle_ms, session_id=response.session_id)
    if hasattr(response, "throttle_time_ms"):
        response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
    return response


def _describe(entity: Entity) -> str:
    user, client = entity
    parts = ([f"user {user}"] if user is not None else []) + (
        [f"client-id {client}"] if client is not None else []
    )
    return ", ".join(parts)


def finite_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0
