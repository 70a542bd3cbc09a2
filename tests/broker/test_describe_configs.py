"""DescribeConfigs takes each setting's type and doc from its declaration (gregor-storage's
for topics, gregor-broker's for brokers), as Kafka's brokers do from their ConfigDefs."""

from __future__ import annotations

from typing import Any

from gregor.devcluster import LocalCluster
from gregor.protocol.apis.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
)
from gregor.storage.config import TOPIC_SETTINGS
from gregor.storage.settings import ConfigType
from gregor_testing.cluster import WireClient, create_topic, unique_topic

TOPIC, BROKER = 2, 4


def describe(cluster: LocalCluster, resource_type: int, name: str, *keys: str) -> dict[str, Any]:
    request = DescribeConfigsRequest(
        resources=[DescribeConfigsResource(resource_type, name, list(keys))],
        include_documentation=True,
    )
    with WireClient(cluster.broker(0)) as client:
        response: DescribeConfigsResponse = client.request(request, 4)
    (result,) = response.results
    assert result.error_code == 0, result.error_message
    return {c.name: c for c in result.configs}


def test_topic_and_broker_configs_carry_their_declared_type_and_doc(
    shared_cluster: LocalCluster,
) -> None:
    topic = unique_topic("describe")
    create_topic(shared_cluster, topic, 1, 1, configs={"cleanup.policy": "compact"})
    configs = describe(shared_cluster, TOPIC, topic, "cleanup.policy", "retention.ms")
    policy, retention = configs["cleanup.policy"], configs["retention.ms"]
    assert (policy.value, policy.config_type) == ("compact", ConfigType.LIST)
    assert policy.documentation == TOPIC_SETTINGS["cleanup.policy"].doc
    assert (retention.value, retention.config_type) == ("604800000", ConfigType.LONG)
    assert not retention.is_sensitive

    broker = describe(shared_cluster, BROKER, "0", "log.retention.ms", "num.partitions")
    assert broker["log.retention.ms"].config_type == ConfigType.LONG
    assert broker["num.partitions"].config_type == ConfigType.INT
    assert "auto-created topic" in broker["num.partitions"].documentation
