"""ACLs on a real cluster, as Kafka's AclAuthorizer enforces them: two brokers with
`authorizer.class.name=kafka.security.authorizer.AclAuthorizer`, no access without an ACL,
and the brokers' own principal (User:broker, replicating over SASL_SSL) and the harness's
PLAINTEXT listener (User:ANONYMOUS) as super users.

The matrix: alice (SASL_PLAINTEXT, PLAIN) is refused with exactly Kafka's error by
confluent-kafka and kafka-python, then allowed once given exactly the ACL the API needs
(`gregor.broker.authorization.API_CHECKS`); prefixed ACLs, DENY over ALLOW, hidden topics
and super users are covered. ACLs are managed with confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient and seen by both; one made through one broker takes effect
on the other. SCRAM credentials set by confluent-kafka's AdminClient sign a new user in at
once, and gregor-client's admin describes and deletes them.
"""

from __future__ import annotations

import contextlib
import ssl
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError as CkError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CkProducer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import AdminClient as CkAdmin
from kafka import KafkaConsumer, KafkaProducer
from kafka import errors as kp_errors
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ACLResourcePatternType as KpPattern
from kafka.admin import ResourceType as KpResourceType

from gregor.client.admin import AdminClient, UserScramCredentialDeletion
from gregor.client.admin import ScramCredentialInfo as GregorScramInfo
from gregor.client.admin import ScramMechanism as GregorScram
from gregor.devcluster import LocalCluster
from gregor.devcluster.admin import controller
from gregor.protocol.apis.alter_configs import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
)
from gregor.protocol.apis.controlled_shutdown import ControlledShutdownRequest
from gregor.protocol.apis.create_acls import AclCreation, CreateAclsRequest
from gregor.protocol.apis.create_partitions import CreatePartitionsRequest, CreatePartitionsTopic
from gregor.protocol.apis.create_topics import CreatableTopic, CreateTopicsRequest
from gregor.protocol.apis.delete_records import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from gregor.protocol.apis.delete_topics import DeleteTopicsRequest
from gregor.protocol.apis.describe_configs import DescribeConfigsRequest, DescribeConfigsResource
from gregor.protocol.apis.elect_leaders import ElectLeadersRequest
from gregor.protocol.apis.find_coordinator import FindCoordinatorRequest
from gregor.protocol.apis.leader_and_isr import LeaderAndIsrRequest
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from gregor.protocol.apis.list_partition_reassignments import ListPartitionReassignmentsRequest
from gregor.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from gregor.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from gregor.protocol.apis.stop_replica import StopReplicaRequest
from gregor.protocol.apis.update_metadata import UpdateMetadataRequest
from gregor.protocol.apis.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from gregor.protocol.errors import ResourceNotFoundError
from gregor.protocol.records import BatchBuilder
from gregor.protocol.schema import Request
from gregor_testing.cluster import WireClient, create_topic, wait_for
from gregor_testing.security import (
    BROKER_USER,
    MODE,
    USERS,
    Pki,
    acl_cluster_fixture,
    ck_conf,
    ck_consume,
    ck_produce,
    describe_acls,
    sasl,
    settled,
)

ALICE = "User:alice"


acl_cluster = acl_cluster_fixture("acl_cluster", "module")


def kp_conf(cluster: LocalCluster, user: str = "alice") -> dict[str, Any]:
    password = BROKER_USER[1] if user == BROKER_USER[0] else USERS[user]
    return {
        "bootstrap_servers": cluster.bootstrap_servers_of(MODE),
        "security_protocol": MODE,
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


@pytest.fixture
def admin(acl_cluster: LocalCluster) -> CkAdmin:
    """confluent-kafka's AdminClient as User:broker (a super user)."""
    return CkAdmin(ck_conf(acl_cluster, BROKER_USER[0]))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allow(
    resource: ResourceType,
    name: str,
    operation: AclOperation,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(resource, name, pattern, ALICE, "*", operation, permission)


def create_acls(cluster: LocalCluster, admin: CkAdmin, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls).values():
        assert future.result(timeout=30) is None
    settled(cluster)


def alice_acls(admin: CkAdmin, name: str) -> set[tuple[Any, ...]]:
    found = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            name,
            ResourcePatternType.MATCH,
            ALICE,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=30)
    return {
        (b.restype, b.name, b.resource_pattern_type, b.operation, b.permission_type) for b in found
    }


# -- confluent-kafka -----------------------------------------------------------------------


def kafka_error_code(call: Callable[[], object]) -> int:
    """The code of the KafkaException `call` raises. Unlike `pytest.raises(...) as e`, which
    keeps the traceback and so this frame and its clients alive (a reference cycle), until
    the garbage collector gets to them: librdkafka clients reconnect and log till then."""
    try:
        call()
    except KafkaException as exc:
        return int(exc.args[0].code())
    raise AssertionError(f"{call} raised no KafkaException")


def test_confluent_kafka_matrix(acl_cluster: LocalCluster, admin: CkAdmin) -> None:
    topic, hidden, group = unique("acl"), unique("hidden"), unique("g")
    create_topic(acl_cluster, topic, partitions=2, replication_factor=2)
    create_topic(acl_cluster, hidden)

    # No ACL: refused, with no side effect.
    assert ck_produce(acl_cluster, topic) == [CkError.TOPIC_AUTHORIZATION_FAILED] * 5
    # WRITE on the topic: produced; DESCRIBE is implied, so the topic is listed, others not.
    create_acls(acl_cluster, admin, [allow(ResourceType.TOPIC, topic, AclOperation.WRITE)])
    assert ck_produce(acl_cluster, topic) == [0] * 5
    listed = CkAdmin(ck_conf(acl_cluster)).list_topics(timeout=30).topics
    assert topic in listed and hidden not in listed
    # READ on the topic but nothing on the group.
    create_acls(acl_cluster, admin, [allow(ResourceType.TOPIC, topic, AclOperation.READ)])
    assert ck_consume(acl_cluster, topic, group, 5) == CkError.GROUP_AUTHORIZATION_FAILED
    # READ on groups by prefix: consumed.
    prefixed = allow(ResourceType.GROUP, "g-", AclOperation.READ, ResourcePatternType.PREFIXED)
    create_acls(acl_cluster, admin, [prefixed])
    assert sorted(ck_consume(acl_cluster, topic, group, 5)) == [b"v%d" % i for i in range(5)]
    # DENY beats ALLOW.
    deny = allow(ResourceType.TOPIC, topic, AclOperation.READ, permission=AclPermissionType.DENY)
    create_acls(acl_cluster, admin, [deny])
    assert ck_consume(acl_cluster, topic, unique("g"), 5) == CkError.TOPIC_AUTHORIZATION_FAILED
    # A transactional id needs WRITE on it.
    producer = CkProducer({**ck_conf(acl_cluster), "transactional.id": unique("tx")})
    try:
        code = kafka_error_code(lambda: producer.init_transactions(30))
    finally:
        with contextlib.suppress(KafkaException):  # fatal: it cannot abort, only go
            producer.close()
    assert code == CkError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Changing ACLs needs ALTER on the cluster.
    alice_admin = CkAdmin(ck_conf(acl_cluster))  # kept: a destroyed handle fails its futures
    futures = alice_admin.create_acls([prefixed])
    code = kafka_error_code(lambda: next(iter(futures.values())).result(timeout=30))
    assert code == CkError.CLUSTER_AUTHORIZATION_FAILED

    # What the AdminClient created, it describes, and deletes.
    assert alice_acls(admin, topic) == {
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, op, perm)
        for op, perm in [
            (AclOperation.WRITE, AclPermissionType.ALLOW),
            (AclOperation.READ, AclPermissionType.ALLOW),
            (AclOperation.READ, AclPermissionType.DENY),
        ]
    }
    deny_filter = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        ALICE,
        "*",
        AclOperation.READ,
        AclPermissionType.DENY,
    )
    removed = admin.delete_acls([deny_filter])
    settled(acl_cluster)
    assert [b.permission_type for b in next(iter(removed.values())).result(timeout=30)] == [
        AclPermissionType.DENY
    ]
    assert sorted(ck_consume(acl_cluster, topic, unique("g"), 5)) == [b"v%d" % i for i in range(5)]


# -- kafka-python --------------------------------------------------------------------------


def test_kafka_python_matrix(acl_cluster: LocalCluster, admin: CkAdmin) -> None:
    topic, group = unique("kp"), unique("kpg")  # not under the "g-" prefix alice reads
    create_topic(acl_cluster, topic)
    kp_admin = KafkaAdminClient(**kp_conf(acl_cluster, BROKER_USER[0]))
    try:
        with pytest.raises(kp_errors.TopicAuthorizationFailedError):
            producer = KafkaProducer(**kp_conf(acl_cluster), max_block_ms=10_000)
            try:
                producer.send(topic, b"v").get(timeout=30)
            finally:
                producer.close(10)
        # kafka-python's admin creates the ACL; confluent-kafka's describes it.
        write = ACL(
            ALICE,
            "*",
            ACLOperation.WRITE,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.TOPIC, topic, KpPattern.LITERAL),
        )
        created = kp_admin.create_acls([write])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        settled(acl_cluster)
        assert alice_acls(admin, topic) == {
            (
                ResourceType.TOPIC,
                topic,
                ResourcePatternType.LITERAL,
                AclOperation.WRITE,
                AclPermissionType.ALLOW,
            )
        }
        producer = KafkaProducer(**kp_conf(acl_cluster), acks="all")
        try:
            offsets = [producer.send(topic, b"v%d" % i).get(timeout=30).offset for i in range(3)]
        finally:
            producer.close(10)
        assert offsets == [0, 1, 2]
        # READ on the topic (confluent-kafka made it; kafka-python's admin lists it), no group.
        create_acls(acl_cluster, admin, [allow(ResourceType.TOPIC, topic, AclOperation.READ)])
        found, error = kp_admin.describe_acls(
            ACLFilter(
                ALICE,
                None,
                ACLOperation.ANY,
                ACLPermissionType.ANY,
                ResourcePatternFilter(KpResourceType.TOPIC, topic, KpPattern.LITERAL),
            )
        )
        assert error is kp_errors.NoError
        assert {a.operation for a in found} == {ACLOperation.WRITE, ACLOperation.READ}
        with pytest.raises(kp_errors.GroupAuthorizationFailedError):
            kp_consume(acl_cluster, topic, group)
        create_acls(acl_cluster, admin, [allow(ResourceType.GROUP, group, AclOperation.READ)])
        assert kp_consume(acl_cluster, topic, group) == [b"v0", b"v1", b"v2"]
        # ALTER on the cluster is missing: kafka-python's admin is refused as alice.
        alice_admin = KafkaAdminClient(**kp_conf(acl_cluster))
        try:
            refused = alice_admin.create_acls([write])
            assert refused["failed"] == [kp_errors.ClusterAuthorizationFailedError]
        finally:
            alice_admin.close()
    finally:
        kp_admin.close()


def kp_consume(cluster: LocalCluster, topic: str, group: str) -> list[bytes]:
    consumer = KafkaConsumer(
        topic,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15_000,
        **kp_conf(cluster),
    )
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == 3:
                break
        return values
    finally:
        consumer.close()


# -- every broker follows the changes --------------------------------------------------------


def test_a_change_through_one_broker_takes_effect_on_the_other(
    acl_cluster: LocalCluster, admin: CkAdmin
) -> None:
    topic = unique("moved")
    # Broker 1 leads the only partition: the Produce is authorized by broker 1's cache.
    create_topic(acl_cluster, topic, assignment={0: [1]})
    broker0, broker1 = acl_cluster.brokers
    assert ck_produce(acl_cluster, topic, 1) == [CkError.TOPIC_AUTHORIZATION_FAILED]
    with WireClient(broker0) as wire:
        response = wire.request(
            CreateAclsRequest(creations=[AclCreation(2, topic, 3, ALICE, "*", 4, 3)]), 3
        )
    assert [r.error_code for r in response.results] == [0]

    def on_broker1() -> bool:
        with WireClient(broker1) as wire:
            found = wire.request(describe_acls(2, topic, 3), 3)
        return [r.resource_name for r in found.resources] == [topic]

    wait_for(on_broker1, 10, "broker 1 to load the ACL created through broker 0")
    assert ck_produce(acl_cluster, topic, 3) == [0, 0, 0]


# -- SCRAM credentials through the admin APIs -----------------------------------------------


def test_scram_credentials_managed_by_admin_clients(
    acl_cluster: LocalCluster, admin: CkAdmin
) -> None:
    user, password = unique("carol"), "carol-secret"
    carol = {
        "bootstrap.servers": acl_cluster.bootstrap_servers_of(MODE),
        **sasl(user, password),
        "sasl.mechanism": "SCRAM-SHA-512",
    }
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
    )
    # alice may not: ALTER on the cluster is needed.
    alice_admin = CkAdmin(ck_conf(acl_cluster))
    code = kafka_error_code(
        lambda: alice_admin.alter_user_scram_credentials([upsert])[user].result(timeout=30)
    )
    assert code == CkError.CLUSTER_AUTHORIZATION_FAILED
    # confluent-kafka sets it; carol signs in with it at once; gregor-client describes it.
    assert admin.alter_user_scram_credentials([upsert])[user].result(timeout=30) is None
    assert isinstance(CkAdmin(carol).list_topics(timeout=30).topics, dict)
    with AdminClient(
        {"bootstrap.servers": acl_cluster.bootstrap_servers_of(MODE), **sasl(*BROKER_USER)}
    ) as gregor_admin:
        assert gregor_admin.describe_user_scram_credentials([user]) == {
            user: [GregorScramInfo(GregorScram.SCRAM_SHA_512, 8192)]
        }
        gregor_admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, GregorScram.SCRAM_SHA_512)]
        )
        with pytest.raises(ResourceNotFoundError):
            gregor_admin.describe_user_scram_credentials([user])
    with pytest.raises(KafkaException):
        CkAdmin({**carol, "client.id": "after-deletion"}).list_topics(timeout=10)


# -- every API refused without an ACL, with no side effect ----------------------------------

TOPIC_REFUSED, GROUP_REFUSED = 29, 30
CLUSTER_REFUSED, TXN_REFUSED = 31, 53


def refusals(topic: str) -> list[tuple[Request, int, Callable[[Any], list[int]], int]]:
    """(request, version, its error codes, the code Kafka answers without an ACL) for the
    APIs of `API_CHECKS` a client or another broker sends."""

    def partitions(response: Any) -> list[int]:
        return [p.error_code for t in response.topics for p in t.partitions]

    def top(response: Any) -> list[int]:
        return [response.error_code]

    return [
        (
            CreateTopicsRequest(topics=[CreatableTopic(f"{topic}-new", 1, 1)], timeout_ms=5000),
            5,
            lambda r: [t.error_code for t in r.topics],
            TOPIC_REFUSED,
        ),
        (
            DeleteTopicsRequest(topic_names=[topic], timeout_ms=5000),
            4,
            lambda r: [t.error_code for t in r.responses],
            TOPIC_REFUSED,
        ),
        (
            CreatePartitionsRequest(
                topics=[CreatePartitionsTopic(topic, 3, None)], timeout_ms=5000
            ),
            1,
            lambda r: [t.error_code for t in r.results],
            TOPIC_REFUSED,
        ),
        (
            DeleteRecordsRequest(
                topics=[DeleteRecordsTopic(topic, [DeleteRecordsPartition(0, 1)])], timeout_ms=5000
            ),
            1,
            partitions,
            TOPIC_REFUSED,
        ),
        (
            ListOffsetsRequest(
                replica_id=-1, topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(0, -1, -1)])]
            ),
            4,
            partitions,
            TOPIC_REFUSED,
        ),
        (
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsResource(2, topic, None),
                    DescribeConfigsResource(4, "", None),
                ]
            ),
            1,
            lambda r: [x.error_code for x in r.results],
            TOPIC_REFUSED,  # and CLUSTER_REFUSED for the broker: checked below
        ),
        (
            AlterConfigsRequest(
                resources=[AlterConfigsResource(2, topic, [AlterableConfig("retention.ms", "1")])]
            ),
            1,
            lambda r: [x.error_code for x in r.responses],
            TOPIC_REFUSED,
        ),
        (
            MetadataRequest(
                topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
            ),
            9,
            lambda r: [t.error_code for t in r.topics],
            TOPIC_REFUSED,
        ),
        (
            FindCoordinatorRequest(key_type=0, coordinator_keys=["w-group"]),
            4,
            lambda r: [c.error_code for c in r.coordinators],
            GROUP_REFUSED,
        ),
        (
            FindCoordinatorRequest(key_type=1, coordinator_keys=["w-txn"]),
            4,
            lambda r: [c.error_code for c in r.coordinators],
            TXN_REFUSED,
        ),
        (ControlledShutdownRequest(broker_id=0, broker_epoch=-1), 3, top, CLUSTER_REFUSED),
        (LeaderAndIsrRequest(controller_id=0), 5, top, CLUSTER_REFUSED),
        (UpdateMetadataRequest(controller_id=0), 7, top, CLUSTER_REFUSED),
        (StopReplicaRequest(controller_id=0), 3, top, CLUSTER_REFUSED),
        (
            WriteTxnMarkersRequest(
                markers=[WritableTxnMarker(1, 0, True, [WritableTxnMarkerTopic(topic, [0])], 0)]
            ),
            1,
            lambda r: [p.error_code for m in r.markers for t in m.topics for p in t.partitions],
            CLUSTER_REFUSED,
        ),
        (ElectLeadersRequest(election_type=0, topic_partitions=None), 1, top, CLUSTER_REFUSED),
        (ListPartitionReassignmentsRequest(topics=None), 0, top, CLUSTER_REFUSED),
        (describe_acls(), 1, top, CLUSTER_REFUSED),
    ]


def test_every_api_refuses_a_principal_without_acls(acl_cluster: LocalCluster, pki: Pki) -> None:
    """alice by her client certificate (mTLS, principal User:alice) on the controller, where
    admin requests are answered: each refused with Kafka's code, and nothing changed."""
    topic = unique("w")
    create_topic(acl_cluster, topic, partitions=1)
    with WireClient(acl_cluster.brokers[0]) as wire:  # the super user writes one record
        produced = wire.request(
            ProduceRequest(
                acks=-1,
                timeout_ms=10_000,
                topic_data=[TopicProduceData(topic, [PartitionProduceData(0, one_batch())])],
            ),
            8,
        )
    assert [p.error_code for t in produced.responses for p in t.partition_responses] == [0]
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.client_certificate), str(pki.client_key))
    chosen = controller(acl_cluster)
    with WireClient(chosen, listener="SSL", ssl_context=context) as wire:
        for request, version, codes, expected in refusals(topic):
            found = codes(wire.request(request, version))
            if isinstance(request, DescribeConfigsRequest):
                assert found == [TOPIC_REFUSED, CLUSTER_REFUSED], request
            else:
                assert found and set(found) == {expected}, (type(request).__name__, found)
        everything = wire.request(MetadataRequest(topics=None), 9)
        assert topic not in {t.name for t in everything.topics}
    # Nothing happened: the topic is there with its one partition and its one record.
    with WireClient(acl_cluster.brokers[0]) as wire:  # its leader
        seen = wire.request(MetadataRequest(topics=[MetadataRequestTopic(name=topic)]), 9)
        assert [(t.error_code, len(t.partitions)) for t in seen.topics] == [(0, 1)]
        missing = wire.request(
            MetadataRequest(
                topics=[MetadataRequestTopic(name=f"{topic}-new")], allow_auto_topic_creation=False
            ),
            9,
        )
        assert [t.error_code for t in missing.topics] == [3]
        ends = wire.request(
            ListOffsetsRequest(
                replica_id=-1, topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(0, -1, -2)])]
            ),
            4,
        )
        assert [(p.error_code, p.offset) for t in ends.topics for p in t.partitions] == [(0, 0)]


def one_batch() -> bytes:
    builder = BatchBuilder()
    builder.append(b"v", key=b"k")
    return builder.build()
