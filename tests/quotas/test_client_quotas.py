"""Client quotas on a real cluster: altered and described through the admin API (gregor-client),
kept in ZooKeeper as Kafka keeps them, applied by every broker through /config/changes, and a
request quota throttling clients that send Metadata in a loop (raw protocol and librdkafka)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from gregor.broker.zk import znodes
from gregor.client import AdminClient
from gregor.client.admin import ClientQuotaEntity, ClientQuotaFilterComponent, QuotaMatch
from gregor.devcluster import LocalCluster
from gregor.protocol.apis.metadata import MetadataRequest
from gregor.protocol.errors import InvalidRequestError
from gregor_testing.cluster import METADATA_VERSION, WireClient, entity_config, wait_for
from gregor_testing.processes import zookeeper_client

ALICE = ClientQuotaEntity({"user": "alice"})
ALICE_C1 = ClientQuotaEntity({"user": "alice", "client-id": "c1"})
DEFAULT_CLIENT = ClientQuotaEntity({"client-id": None})
BOB_ANY_CLIENT = ClientQuotaEntity({"user": "bob", "client-id": None})


@pytest.fixture
def admin(quota_cluster: LocalCluster) -> Iterator[AdminClient]:
    with AdminClient({"bootstrap.servers": quota_cluster.bootstrap_servers}) as client:
        yield client


def test_quotas_are_altered_and_described_as_kafka_keeps_them(
    quota_cluster: LocalCluster, admin: AdminClient
) -> None:
    # alice also has a SCRAM credential: altering her quotas must keep it.
    with zookeeper_client(quota_cluster.zookeeper_connect) as zk:
        zk.create(
            znodes.config_entity_path("users", "alice"),
            znodes.encode_entity_config({"SCRAM-SHA-256": "salt=c2FsdA==,iterations=4096"}),
            makepath=True,
        )
    admin.alter_client_quotas(
        {
            ALICE: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
            ALICE_C1: {"consumer_byte_rate": 4096.0},
            DEFAULT_CLIENT: {"consumer_byte_rate": 2048.0},
            BOB_ANY_CLIENT: {"producer_byte_rate": 512.0},
        }
    )
    # Kafka's znodes: /config/users/alice, /config/users/alice/clients/c1, /config/clients/<default>
    assert entity_config(quota_cluster, "users", "alice") == {
        "SCRAM-SHA-256": "salt=c2FsdA==,iterations=4096",
        "producer_byte_rate": "1024",
        "request_percentage": "12.5",
    }
    assert entity_config(quota_cluster, "users", "alice/clients/c1") == {
        "consumer_byte_rate": "4096"
    }
    assert entity_config(quota_cluster, "clients", "<default>") == {"consumer_byte_rate": "2048"}

    everything = admin.describe_client_quotas()
    assert everything == {
        ALICE: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        ALICE_C1: {"consumer_byte_rate": 4096.0},
        DEFAULT_CLIENT: {"consumer_byte_rate": 2048.0},
        BOB_ANY_CLIENT: {"producer_byte_rate": 512.0},
    }
    exact_alice = ClientQuotaFilterComponent("user", QuotaMatch.EXACT, "alice")
    assert set(admin.describe_client_quotas([exact_alice])) == {ALICE, ALICE_C1}
    assert set(admin.describe_client_quotas([exact_alice], strict=True)) == {ALICE}
    any_user = ClientQuotaFilterComponent("user", QuotaMatch.ANY)
    default_client = ClientQuotaFilterComponent("client-id", QuotaMatch.DEFAULT)
    assert set(admin.describe_client_quotas([any_user, default_client])) == {BOB_ANY_CLIENT}
    assert set(admin.describe_client_quotas([default_client], strict=True)) == {DEFAULT_CLIENT}

    # validate_only changes nothing; a removal leaves the entity's other quotas.
    admin.alter_client_quotas({ALICE: {"producer_byte_rate": 1.0}}, validate_only=True)
    admin.alter_client_quotas({ALICE: {"request_percentage": None}})
    admin.alter_client_quotas({BOB_ANY_CLIENT: {"producer_byte_rate": None}})
    remaining = admin.describe_client_quotas()
    assert remaining[ALICE] == {"producer_byte_rate": 1024.0}
    assert BOB_ANY_CLIENT not in remaining
    assert "SCRAM-SHA-256" in entity_config(quota_cluster, "users", "alice")

    for bad in (
        {ALICE: {"no_such_quota": 1.0}},
        {ALICE: {"producer_byte_rate": 10.5}},  # byte rates are whole numbers
        {ALICE: {"consumer_byte_rate": -1.0}},
        {ClientQuotaEntity({"ip": "127.0.0.1"}): {"producer_byte_rate": 1.0}},
    ):
        with pytest.raises(InvalidRequestError):
            admin.alter_client_quotas(bad)
    with pytest.raises(InvalidRequestError):
        admin.describe_client_quotas([ClientQuotaFilterComponent("group", QuotaMatch.ANY)])
    admin.alter_client_quotas(
        {
            ALICE: {"producer_byte_rate": None},
            ALICE_C1: {"consumer_byte_rate": None},
            DEFAULT_CLIENT: {"consumer_byte_rate": None},
        }
    )
    assert admin.describe_client_quotas() == {}


def metadata_throttle(client: WireClient) -> int:
    response = client.request(MetadataRequest(topics=[]), METADATA_VERSION)
    return int(response.throttle_time_ms)


def test_a_request_quota_reaches_every_broker_and_throttles_a_metadata_loop(
    quota_cluster: LocalCluster, admin: AdminClient
) -> None:
    # WireClient's client id; 0.01% of a broker's loop is a few Metadata requests a second.
    wire = ClientQuotaEntity({"client-id": "wire-test"})
    librdkafka = ClientQuotaEntity({"client-id": "metadata-loop"})
    admin.alter_client_quotas(
        {wire: {"request_percentage": 0.01}, librdkafka: {"request_percentage": 0.01}}
    )
    try:
        # Each broker applies the change from /config/changes, and a client looping on
        # Metadata gets answers (never an error) with throttle_time_ms set.
        for broker in quota_cluster.brokers:
            with WireClient(broker) as client:
                wait_for(
                    lambda c=client: metadata_throttle(c) > 0, 15.0, f"a throttle from {broker}"
                )

        throttles: list[int] = []
        producer = Producer(
            {
                "bootstrap.servers": quota_cluster.bootstrap_servers,
                "client.id": "metadata-loop",
                "throttle_cb": lambda event: throttles.append(event.throttle_time),
            }
        )

        # librdkafka also reports a 0 when a throttle ends (rdkafka_op.c), so the events
        # alternate; what matters is that a positive throttle_time reached it.
        def throttled() -> bool:
            producer.list_topics(timeout=10)
            producer.poll(0)
            return any(t > 0 for t in throttles)

        wait_for(throttled, 30.0, "librdkafka's throttle callback with a throttle time")
        assert all(t >= 0 for t in throttles)
        producer.flush(5)
    finally:
        admin.alter_client_quotas(
            {wire: {"request_percentage": None}, librdkafka: {"request_percentage": None}}
        )
    # Without the quota, the same loop is answered unthrottled again.
    with WireClient(quota_cluster.broker(0)) as client:
        wait_for(lambda: metadata_throttle(client) == 0, 15.0, "the quota's removal")
