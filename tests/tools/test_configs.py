"""`gregor configs` against a real cluster: topic overrides and dynamic broker configs set,
described with their source, and deleted; quotas of users and of the default client id set,
listed and removed."""

from __future__ import annotations

from tools.helpers import fails, gregor, on

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic


def described(cluster: LocalCluster, *entity: str) -> dict[str, dict[str, object]]:
    [found] = on(cluster, "configs", "describe", *entity)
    configs: dict[str, dict[str, object]] = found["configs"]
    return configs


def test_topic_and_broker_configs(tools_cluster: LocalCluster) -> None:
    topic = unique_topic("cli-configs")
    create_topic(tools_cluster, topic, partitions=1, replication_factor=3)
    entity = ("--entity-type", "topics", "--entity-name", topic)
    assert described(tools_cluster, *entity) == {}
    on(
        tools_cluster,
        "configs",
        "alter",
        *entity,
        "--add-config",
        "retention.ms=86400000,cleanup.policy=[compact,delete]",
    )
    configs = described(tools_cluster, *entity)
    assert {k: v["value"] for k, v in configs.items()} == {
        "retention.ms": "86400000",
        "cleanup.policy": "compact,delete",
    }
    assert {v["source"] for v in configs.values()} == {"DYNAMIC_TOPIC_CONFIG"}
    every = described(tools_cluster, *entity, "--all")
    assert every["segment.bytes"]["source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")
    on(tools_cluster, "configs", "alter", *entity, "--delete-config", "retention.ms")
    assert list(described(tools_cluster, *entity)) == ["cleanup.policy"]

    broker = ("--entity-type", "brokers", "--entity-name", "1")
    on(tools_cluster, "configs", "alter", *broker, "--add-config", "log.retention.bytes=123456789")
    assert described(tools_cluster, *broker)["log.retention.bytes"] == {
        "value": "123456789",
        "source": "DYNAMIC_BROKER_CONFIG",
        "read_only": False,
        "sensitive": False,
    }
    on(tools_cluster, "configs", "alter", *broker, "--delete-config", "log.retention.bytes")
    assert "log.retention.bytes" not in described(tools_cluster, *broker)
    text = gregor(
        "configs",
        "describe",
        *broker,
        "--all",
        "--bootstrap-server",
        tools_cluster.bootstrap_servers,
    ).stdout
    assert "log.retention.bytes" in text

    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(
        tools_cluster, "configs", "alter", "--entity-type", "topics",
        "--entity-name", unique_topic("missing"), "--add-config", "retention.ms=1",
    )  # fmt: skip


def test_user_and_client_quotas(tools_cluster: LocalCluster) -> None:
    user = ("--entity-type", "users", "--entity-name", "alice")
    on(tools_cluster, "configs", "alter", *user, "--add-config", "producer_byte_rate=1048576")
    assert described(tools_cluster, *user) == {"producer_byte_rate": {"value": "1048576.0"}}
    client = ("--entity-type", "clients", "--entity-default")
    on(tools_cluster, "configs", "alter", *client, "--add-config", "request_percentage=25")
    [default] = on(tools_cluster, "configs", "describe", *client)
    assert default == {
        "entity_type": "clients",
        "entity_name": "",
        "configs": {"request_percentage": {"value": "25.0"}},
    }
    listed = on(tools_cluster, "configs", "describe", "--entity-type", "users")
    assert [(u["entity_name"], u["configs"]) for u in listed] == [
        ("alice", {"producer_byte_rate": {"value": "1048576.0"}})
    ]
    on(tools_cluster, "configs", "alter", *user, "--delete-config", "producer_byte_rate")
    on(tools_cluster, "configs", "alter", *client, "--delete-config", "request_percentage")
    assert on(tools_cluster, "configs", "describe", *user) == []
    assert "quota values are numbers" in fails(
        tools_cluster, "configs", "alter", *user, "--add-config", "producer_byte_rate=fast"
    )
