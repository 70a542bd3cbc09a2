"""Client quotas without a broker: Kafka's precedence, the token bucket, the throttle time."""

from __future__ import annotations

import pytest

from gregor.broker.metrics import Metrics
from gregor.broker.quotas import (
    DEFAULT,
    ClientQuotas,
    QuotaType,
    TokenBucket,
    entity_of,
    entity_path,
    throttled_response,
    user_of,
)
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from gregor.protocol.apis.produce import ProduceResponse

PRODUCE = QuotaType.PRODUCE


def quotas(**entities: dict[str, str]) -> ClientQuotas:
    """ClientQuotas from {"users/alice": {...}, "clients/c": {...}} (keys with / as __)."""
    q = ClientQuotas()
    for path, config in entities.items():
        entity_type, _, name = path.replace("__", "/").partition("/")
        q.config_changed(entity_type, name, config)
    return q


def bound(q: ClientQuotas, user: str, client: str) -> tuple[tuple[str, str], float] | None:
    sensor = q.sensor(PRODUCE, user, client)
    return None if sensor is None else (sensor.tags, sensor.bound)


def test_entities_map_to_znodes_both_ways() -> None:
    for entity_type, name, entity in [
        ("users", "alice", ("alice", None)),
        ("clients", "c1", (None, "c1")),
        ("users", "alice/clients/c1", ("alice", "c1")),
        ("users", "<default>/clients/<default>", (DEFAULT, DEFAULT)),
    ]:
        assert entity_of(entity_type, name) == entity
        assert entity_path(entity) == (entity_type, name)
    assert entity_of("topics", "t") is None
    assert entity_of("users", "alice/other/x") is None


def test_precedence_is_kafkas_most_specific_first() -> None:
    rate = "producer_byte_rate"
    layers = [
        ("clients__<default>", 8),
        ("clients__c", 7),
        ("users__<default>", 6),
        ("users__<default>__clients__<default>", 5),
        ("users__<default>__clients__c", 4),
        ("users__u", 3),
        ("users__u__clients__<default>", 2),
        ("users__u__clients__c", 1),
    ]
    expected_tags = {8: ("", "c"), 7: ("", "c"), 6: ("u", ""), 3: ("u", "")}
    configs: dict[str, dict[str, str]] = {}
    for path, level in layers:
        # Each more specific layer, once added, wins over all those before it.
        configs[path] = {rate: str(level * 1000)}
        q = quotas(**configs)
        assert bound(q, "u", "c") == (expected_tags.get(level, ("u", "c")), level * 1000.0)
    # Another user and client fall back to the defaults at their own level.
    assert bound(q, "v", "d") == (("v", "d"), 5000.0)


def test_quota_types_resolve_independently_and_keys_other_than_quotas_are_ignored() -> None:
    q = quotas(
        users__alice={"SCRAM-SHA-256": "salt=x", "consumer_byte_rate": "2000"},
        clients__c={"producer_byte_rate": "1000"},
    )
    assert bound(q, "alice", "c") == (("", "c"), 1000.0)
    sensor = q.sensor(QuotaType.FETCH, "alice", "c")
    assert sensor is not None and (sensor.tags, sensor.bound) == (("alice", ""), 2000.0)
    assert q.sensor(QuotaType.REQUEST, "alice", "c") is None


def test_a_change_applies_to_the_rates_kept_and_removal_disables() -> None:
    q = quotas(clients__c={"producer_byte_rate": "1000"})
    sensor = q.sensor(PRODUCE, "u", "c")
    q.config_changed("clients", "c", {"producer_byte_rate": "5000"})
    assert q.sensor(PRODUCE, "u", "c") is sensor and sensor is not None and sensor.bound == 5000
    q.config_changed("clients", "c", {})
    assert not q.enabled and q.sensor(PRODUCE, "u", "c") is None


def test_bucket_allows_the_burst_then_holds_the_rate_at_the_quota() -> None:
    bucket = TokenBucket(11.0, 1000.0, now=0.0)
    bucket.record(11_000, 1000.0, 0.0)  # the whole burst at once
    assert bucket.throttle_s(1000.0) == 0.0
    bucket.record(500, 1000.0, 0.0)
    assert bucket.throttle_s(1000.0) == pytest.approx(0.5)
    # A client that waits each throttle out runs at exactly the quota: 500 bytes per 0.5 s.
    now = 0.5
    for _ in range(100):
        bucket.record(500, 1000.0, now)
        now += bucket.throttle_s(1000.0)
    assert now == pytest.approx(50.5)
    # Idle for long, it gets its burst back, never more.
    bucket.record(0, 1000.0, now + 1000)
    assert bucket.tokens == 11_000


def test_sensor_throttles_in_ms_and_follows_a_new_quota() -> None:
    q = quotas(clients__c={"producer_byte_rate": "1000"})
    sensor = q.sensor(PRODUCE, "ANONYMOUS", "c")
    assert sensor is not None
    assert sensor.record(11_000, sensor.bucket._last) == 0
    assert sensor.record(2_000, sensor.bucket._last) == 2_000
    q.config_changed("clients", "c", {"producer_byte_rate": "4000"})
    assert sensor.record(0, sensor.bucket._last + 0.25) == 250  # refilled at the new rate


def test_the_network_hook_throttles_fetches_empty_and_spares_followers() -> None:
    q = quotas(clients__c={"consumer_byte_rate": "1000"})  # a burst of 11000 bytes
    consumer = FetchRequest(replica_id=-1)
    follower = FetchRequest(replica_id=2)
    assert q.throttle("User:ANONYMOUS", "c", ApiKey.FETCH, consumer, 100, 5_000, 0.0) == (0, None)
    throttle, over = q.throttle("User:ANONYMOUS", "c", ApiKey.FETCH, consumer, 100, 20_000, 0.0)
    assert throttle > 0 and over is QuotaType.FETCH
    # The throttled fetch was not counted: only the first 5000 bytes were.
    sensor = q.sensor(QuotaType.FETCH, user_of("User:ANONYMOUS"), "c")
    assert sensor is not None and sensor.bucket.tokens == pytest.approx(11_000 - 5_000, abs=1)
    assert q.throttle("User:ANONYMOUS", "c", ApiKey.FETCH, follower, 100, 10**9, 0.0) == (0, None)
    assert sensor.value_total == 5_000  # the client's bytes: not the refused, nor a follower's
    metrics = Metrics()
    metrics.sent("t", 20_000)
    records = PartitionData(records=b"r" * 20_000)
    full = FetchResponse(
        session_id=0, responses=[FetchableTopicResponse("t", partitions=[records])]
    )
    empty = throttled_response(full, throttle, over, metrics)
    assert empty.responses == [] and empty.throttle_time_ms == throttle
    assert metrics.topics["t"].bytes_out == 0 == metrics.bytes_out.count  # not sent after all
    produced = throttled_response(ProduceResponse(), 7, QuotaType.PRODUCE, metrics)
    assert produced.throttle_time_ms == 7


def test_request_quota_counts_loop_time_and_is_capped_at_one_window() -> None:
    q = quotas(users__alice={"request_percentage": "10"})
    # 2 s of loop time at once: 200 percent-seconds, beyond the 110 of the burst by 9 s at
    # 10 percent: capped at one window.
    throttle, over = q.throttle("User:alice", "x", ApiKey.METADATA, None, 10, 10, 2.0)
    assert (throttle, over) == (1000, None)
    # Inter-broker requests are exempt.
    assert q.throttle("User:alice", "x", ApiKey.LEADER_AND_ISR, None, 10, 10, 2.0) == (0, None)
