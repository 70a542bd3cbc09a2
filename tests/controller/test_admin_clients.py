"""confluent-kafka's AdminClient (librdkafka) against a real three-broker cluster: create and
delete topics, create partitions, describe and alter configs, elect leaders, and Kafka's
errors for what is invalid."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import (
    metadata,
    partitions_of,
    unique_topic,
    wait_for,
    wait_for_topic,
)

TIMEOUT = 60


@pytest.fixture(scope="module")
def admin(shared_cluster: LocalCluster) -> Iterator[AdminClient]:
    # The cluster answers ApiVersions before its first controller is elected: wait for
    # every broker to know the controller and all three brokers.
    def settled() -> bool:
        for broker in shared_cluster.brokers:
            answer = metadata(shared_cluster, [], broker.broker_id)
            if answer.controller_id < 0 or len(answer.brokers) != 3:
                return False
        return True

    wait_for(settled, 60, "a controller known to every broker")
    yield AdminClient({"bootstrap.servers": shared_cluster.bootstrap_servers})


def on_controller(cluster: LocalCluster, topic: str) -> dict[int, Any]:
    """The topic's partitions as the controller's broker sees them: admin requests are
    answered once its metadata shows their result (the other brokers follow shortly)."""
    return partitions_of(cluster, topic, metadata(cluster, []).controller_id)


def result(futures: dict[Any, Any], key: Any) -> Any:
    return futures[key].result(timeout=TIMEOUT)


def error_of(futures: dict[Any, Any], key: Any) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        result(futures, key)
    error = caught.value.args[0]
    assert isinstance(error, KafkaError)
    return error


@pytest.mark.interop("confluent", "admin")
def test_create_topics_with_defaults_configs_and_assignments(
    shared_cluster: LocalCluster, admin: AdminClient
) -> None:
    plain, configured, placed = unique_topic(), unique_topic(), unique_topic()
    futures = admin.create_topics(
        [
            NewTopic(plain, num_partitions=3, replication_factor=2),
            NewTopic(
                configured,
                num_partitions=1,
                replication_factor=3,
                config={
                    "retention.ms": "3600000",
                    "cleanup.policy": "compact",
                },
            ),
            NewTopic(placed, 2, replica_assignment=[[2, 0], [0, 1]]),
        ],
        operation_timeout=30,
    )
    for name in (plain, configured, placed):
        assert result(futures, name) is None
    # The answer came once the controller's broker knew every leader.
    partitions = on_controller(shared_cluster, plain)
    assert sorted(partitions) == [0, 1, 2]
    assert all(len(p.replica_nodes) == 2 and p.leader_id >= 0 for p in partitions.values())
    # Leaders are spread round robin, the preferred replica leading.
    assert sorted(p.leader_id for p in partitions.values()) == [0, 1, 2]
    assert all(p.leader_id == p.replica_nodes[0] for p in partitions.values())
    placed_parts = on_controller(shared_cluster, placed)
    assert [placed_parts[0].replica_nodes, placed_parts[1].replica_nodes] == [[2, 0], [0, 1]]
    described = result(
        admin.describe_configs([ConfigResource(ResourceType.TOPIC, configured)]),
        ConfigResource(ResourceType.TOPIC, configured),
    )
    assert described["retention.ms"].value == "3600000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["cleanup.policy"].value == "compact"
    assert described["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert described["segment.bytes"].is_default


def test_create_topics_errors_are_kafkas(shared_cluster: LocalCluster, admin: AdminClient) -> None:
    existing = unique_topic()
    assert result(admin.create_topics([NewTopic(existing, 1, 1)]), existing) is None
    rf, parts, cfg, key, dup = (unique_topic(p) for p in ("rf", "parts", "cfg", "key", "dup"))
    expected = {
        existing: (NewTopic(existing, 1, 1), KafkaError.TOPIC_ALREADY_EXISTS),
        "bad/name": (NewTopic("bad/name", 1, 1), KafkaError.TOPIC_EXCEPTION),
        rf: (NewTopic(rf, 1, 9), KafkaError.INVALID_REPLICATION_FACTOR),
        parts: (NewTopic(parts, 0, 1), KafkaError.INVALID_PARTITIONS),
        cfg: (NewTopic(cfg, 1, 1, config={"retention.ms": "soon"}), KafkaError.INVALID_CONFIG),
        key: (NewTopic(key, 1, 1, config={"no.such.config": "1"}), KafkaError.INVALID_CONFIG),
        dup: (
            NewTopic(dup, 1, replica_assignment=[[0, 0]]),
            KafkaError.INVALID_REPLICA_ASSIGNMENT,
        ),
    }
    futures = admin.create_topics([t for t, _ in expected.values()], operation_timeout=30)
    codes = {name: error_of(futures, name).code() for name in expected}
    assert codes == {name: code for name, (_, code) in expected.items()}
    message = error_of(admin.create_topics([NewTopic(existing, 1, 1)]), existing).str()
    assert f"Topic '{existing}' already exists." in message


def test_validate_only_creates_nothing(shared_cluster: LocalCluster, admin: AdminClient) -> None:
    name = unique_topic()
    assert result(admin.create_topics([NewTopic(name, 2, 2)], validate_only=True), name) is None
    assert on_controller(shared_cluster, name) == {}
    assert result(admin.create_topics([NewTopic(name, 2, 2)]), name) is None
    assert len(on_controller(shared_cluster, name)) == 2


@pytest.mark.interop("confluent", "admin")
def test_delete_topics(shared_cluster: LocalCluster, admin: AdminClient) -> None:
    name = unique_topic()
    assert result(admin.create_topics([NewTopic(name, 2, 3)]), name) is None
    assert result(admin.delete_topics([name], operation_timeout=30), name) is None
    assert on_controller(shared_cluster, name) == {}
    for broker in shared_cluster.brokers:
        wait_for(
            lambda b=broker: partitions_of(shared_cluster, name, b.broker_id) == {},
            30,
            f"broker {broker.broker_id} to forget {name}",
        )
    # Every replica was deleted: its directory renamed for removal, as Kafka does.
    for broker in shared_cluster.brokers:
        wait_for(
            lambda b=broker: (
                sorted(p.name.split(".")[0] for p in b.data_dir.glob(f"{name}-*"))
                == [f"{name}-0", f"{name}-1"]
                and all(p.name.endswith("-delete") for p in b.data_dir.glob(f"{name}-*"))
            ),
            30,
            f"{name}'s logs deleted on broker {broker.broker_id}",
        )
    missing = unique_topic()
    error = error_of(admin.delete_topics([missing], operation_timeout=30), missing)
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


@pytest.mark.interop("confluent", "admin")
def test_create_partitions(shared_cluster: LocalCluster, admin: AdminClient) -> None:
    name = unique_topic()
    assert result(admin.create_topics([NewTopic(name, 1, 2)]), name) is None
    assert result(admin.create_partitions([NewPartitions(name, 4)]), name) is None
    parts = on_controller(shared_cluster, name)
    assert sorted(parts) == [0, 1, 2, 3]
    assert all(len(p.replica_nodes) == 2 for p in parts.values())
    explicit = admin.create_partitions([NewPartitions(name, 5, replica_assignment=[[1, 2]])])
    assert result(explicit, name) is None
    assert on_controller(shared_cluster, name)[4].replica_nodes == [1, 2]
    wait_for_topic(shared_cluster, name, 5)
    shrink = admin.create_partitions([NewPartitions(name, 2)])
    assert error_of(shrink, name).code() == KafkaError.INVALID_PARTITIONS
    unknown = unique_topic()
    missing = admin.create_partitions([NewPartitions(unknown, 2)])
    assert error_of(missing, unknown).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# AlterConfigs is deprecated in the clients, and still part of the protocol we serve.
LEGACY_ALTER = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")


@pytest.mark.interop("confluent", "admin")
@LEGACY_ALTER
def test_alter_and_incremental_alter_topic_configs(
    shared_cluster: LocalCluster, admin: AdminClient
) -> None:
    name = unique_topic()
    assert (
        result(admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "1000"})]), name)
        is None
    )
    resource = ConfigResource(ResourceType.TOPIC, name)
    changes = [
        ConfigEntry("segment.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ]
    incremental = ConfigResource(ResourceType.TOPIC, name, incremental_configs=changes)
    assert result(admin.incremental_alter_configs([incremental]), incremental) is None

    def described() -> dict[str, Any]:
        return result(admin.describe_configs([resource]), resource)  # type: ignore[no-any-return]

    configs = described()
    assert configs["segment.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "compact,delete"
    # AlterConfigs replaces the whole set of overrides.
    whole = ConfigResource(ResourceType.TOPIC, name, set_config={"max.message.bytes": "2048"})
    assert result(admin.alter_configs([whole]), whole) is None
    configs = described()
    assert configs["max.message.bytes"].value == "2048"
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    bad = ConfigResource(ResourceType.TOPIC, name, set_config={"min.insync.replicas": "zero"})
    error = error_of(admin.alter_configs([bad]), bad)
    assert error.code() == KafkaError.INVALID_CONFIG
    append_int = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    assert error_of(admin.incremental_alter_configs([append_int]), append_int).code() == (
        KafkaError.INVALID_CONFIG
    )
    unknown = ConfigResource(ResourceType.TOPIC, unique_topic(), set_config={"retention.ms": "1"})
    assert error_of(admin.alter_configs([unknown]), unknown).code() == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )


@pytest.mark.interop("confluent", "admin")
@LEGACY_ALTER
def test_describe_and_alter_broker_configs(
    shared_cluster: LocalCluster, admin: AdminClient
) -> None:
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = result(admin.describe_configs([resource]), resource)
    assert configs["broker.id"].value == "1"
    assert configs["broker.id"].is_read_only
    assert not configs["log.retention.ms"].is_read_only
    assert configs["zookeeper.session.timeout.ms"].source == (
        ConfigSource.STATIC_BROKER_CONFIG.value
    )
    change = ConfigResource(ResourceType.BROKER, "1", set_config={"log.retention.ms": "7200000"})
    assert result(admin.alter_configs([change]), change) is None
    configs = result(admin.describe_configs([resource]), resource)
    assert configs["log.retention.ms"].value == "7200000"
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    static = ConfigResource(ResourceType.BROKER, "1", set_config={"broker.id": "7"})
    assert error_of(admin.alter_configs([static]), static).code() == KafkaError.INVALID_CONFIG
