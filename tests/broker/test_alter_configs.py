"""AlterConfigs for a topic asks ZooKeeper whether the topic exists, as Kafka's brokers do,
not the answering broker's metadata: a topic the controller has just created can be altered
through any broker at once, before that broker has heard of it."""

from __future__ import annotations

from gregor.broker.zk import znodes
from gregor.devcluster import LocalCluster
from gregor.protocol.apis.alter_configs import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)
from gregor.protocol.errors import ErrorCode
from gregor_testing.cluster import (
    WireClient,
    create_topic,
    entity_config,
    metadata,
    partitions_of,
    unique_topic,
    wait_for_topic,
)

TOPIC = 2


def alter(cluster: LocalCluster, broker_id: int, topic: str) -> AlterConfigsResourceResponse:
    request = AlterConfigsRequest(
        resources=[AlterConfigsResource(TOPIC, topic, [AlterableConfig("retention.ms", "7200000")])]
    )
    with WireClient(cluster.broker(broker_id)) as client:
        response: AlterConfigsResponse = client.request(request, 2)
    (result,) = response.responses
    return result


def test_a_topic_is_alterable_through_a_broker_that_has_not_heard_of_it(
    shared_cluster: LocalCluster,
) -> None:
    controller = metadata(shared_cluster, []).controller_id
    other = next(b.broker_id for b in shared_cluster.brokers if b.broker_id != controller)
    topic = unique_topic("alter-new")
    # With the controller frozen, no broker hears of the new topic.
    shared_cluster.broker(controller).pause()
    try:
        create_topic(shared_cluster, topic, 1, 3, wait=False)
        result = alter(shared_cluster, other, topic)
        assert partitions_of(shared_cluster, topic, other) == {}
    finally:
        shared_cluster.broker(controller).resume()
    assert (result.error_code, result.error_message) == (0, None)
    assert entity_config(shared_cluster, znodes.CONFIG_TOPICS, topic) == {"retention.ms": "7200000"}
    wait_for_topic(shared_cluster, topic, 1)

    missing = unique_topic("alter-missing")
    unknown = alter(shared_cluster, other, missing)
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert unknown.error_message == f"Topic '{missing}' does not exist."
