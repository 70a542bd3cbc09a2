"""`gregor acls` against a cluster with Kafka's AclAuthorizer, connecting over SASL as a super
user through --command-config (a Java client's properties file): the ACLs it adds come back
from --list, and confluent-kafka, signed in as alice, is then allowed or refused exactly as
they say; removal, pattern types, the --producer/--consumer conveniences and Kafka's argument
checks included."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError as CkError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CkProducer
from tools.helpers import gregor

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic
from gregor_testing.security import (
    BROKER_USER,
    MODE,
    USERS,
    acl_cluster_fixture,
    ck_conf,
    ck_consume,
    ck_produce,
    pki_fixture,
    settled,
)

pki = pki_fixture("module")
acl_cluster = acl_cluster_fixture("acl_cluster", "module")
ALICE = "User:alice"


def properties(path: Path, user: str, password: str) -> Path:
    path.write_text(
        f"security.protocol={MODE}\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        f'    username="{user}" password="{password}";\n'
    )
    return path


@pytest.fixture
def acls(acl_cluster: LocalCluster, tmp_path: Path) -> Any:
    """`gregor acls ARGS --json` as User:broker (a super user) over SASL, parsed; every
    broker has the change before it returns."""
    config = properties(tmp_path / "admin.properties", *BROKER_USER)

    def run(*args: str) -> Any:
        done = gregor(
            "acls",
            *args,
            "--bootstrap-server",
            acl_cluster.bootstrap_servers_of(MODE),
            "--command-config",
            str(config),
            "--json",
        )
        settled(acl_cluster)
        return json.loads(done.stdout)

    return run


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def acl(kind: str, name: str, operation: str, **extra: str) -> dict[str, str]:
    return {
        "resource_type": kind,
        "name": name,
        "pattern_type": "LITERAL",
        "principal": ALICE,
        "host": "*",
        "operation": operation,
        "permission_type": "ALLOW",
    } | extra


def key(found: list[dict[str, str]]) -> list[tuple[str, ...]]:
    return sorted(tuple(a.values()) for a in found)


def test_producer_and_consumer_acls_decide_what_alice_may_do(
    acl_cluster: LocalCluster, acls: Any
) -> None:
    topic, group = unique("acl"), unique("g")
    create_topic(acl_cluster, topic, partitions=2, replication_factor=2)
    assert ck_produce(acl_cluster, topic) == [CkError.TOPIC_AUTHORIZATION_FAILED] * 5

    added = acls("--add", "--allow-principal", ALICE, "--producer", "--topic", topic)
    producing = [acl("TOPIC", topic, op) for op in ("WRITE", "DESCRIBE", "CREATE")]
    assert key(added["added"]) == key(added["current"]) == key(producing)
    assert key(acls("--list", "--topic", topic)) == key(producing)
    assert ck_produce(acl_cluster, topic) == [0] * 5
    assert ck_consume(acl_cluster, topic, group, 5) == CkError.GROUP_AUTHORIZATION_FAILED

    # --consumer on groups by prefix: READ, DESCRIBE on topics named topic*, READ on g-*.
    acls(
        "--add", "--allow-principal", ALICE, "--consumer", "--topic", topic, "--group", "g-",
        "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    consuming = [
        acl("TOPIC", topic, op, pattern_type="PREFIXED") for op in ("READ", "DESCRIBE")
    ] + [acl("GROUP", "g-", "READ", pattern_type="PREFIXED")]
    assert sorted(ck_consume(acl_cluster, topic, group, 5)) == [b"v%d" % i for i in range(5)]
    # Literal by default, every pattern applying to the name with match.
    assert key(acls("--list", "--topic", topic)) == key(producing)
    assert key(acls("--list", "--topic", topic, "--resource-pattern-type", "match")) == key(
        producing + consuming[:2]
    )
    assert set(key(acls("--list", "--principal", ALICE))) >= set(key(producing + consuming))

    # A DENY beats the ALLOW; removing it gives the read back.
    deny = ("--deny-principal", ALICE, "--operation", "Read", "--topic", topic)
    acls("--add", *deny)
    assert ck_consume(acl_cluster, topic, unique("g"), 5) == CkError.TOPIC_AUTHORIZATION_FAILED
    removed = acls("--remove", "--force", *deny)
    assert removed["removed"] == [acl("TOPIC", topic, "READ", permission_type="DENY")]
    assert key(removed["current"]) == key(producing)
    assert len(ck_consume(acl_cluster, topic, unique("g"), 5)) == 5

    # --remove without a principal: every ACL of the resource.
    assert key(acls("--remove", "--force", "--topic", topic)["removed"]) == key(producing)
    assert acls("--list", "--topic", topic) == []
    assert ck_produce(acl_cluster, topic, 1) == [CkError.TOPIC_AUTHORIZATION_FAILED]
    acls(
        "--remove",
        "--force",
        "--topic",
        topic,
        "--group",
        "g-",
        "--resource-pattern-type",
        "prefixed",
    )


def test_transactional_id_and_cluster_acls(acl_cluster: LocalCluster, acls: Any) -> None:
    topic, txn = unique("txn"), unique("tx")
    create_topic(acl_cluster, topic)
    acls(
        "--add", "--allow-principal", ALICE, "--allow-host", "127.0.0.1", "--producer",
        "--idempotent", "--topic", topic, "--transactional-id", txn,
    )  # fmt: skip
    found = acls("--list", "--transactional-id", txn) + acls("--list", "--cluster")
    assert key(found) == key(
        [acl("TRANSACTIONAL_ID", txn, op, host="127.0.0.1") for op in ("WRITE", "DESCRIBE")]
        + [acl("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE", host="127.0.0.1")]
    )
    producer = CkProducer({**ck_conf(acl_cluster), "transactional.id": txn})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(30)

    other = CkProducer({**ck_conf(acl_cluster), "transactional.id": unique("tx")})
    with pytest.raises(KafkaException) as refused:
        other.init_transactions(30)
    assert refused.value.args[0].code() == CkError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    acls("--remove", "--force", "--topic", topic, "--transactional-id", txn, "--cluster")
    assert acls("--list", "--cluster") == []


def test_refusals(acl_cluster: LocalCluster, tmp_path: Path) -> None:
    servers = ("--bootstrap-server", acl_cluster.bootstrap_servers_of(MODE))
    alice = properties(tmp_path / "alice.properties", "alice", USERS["alice"])
    # alice may not change ACLs: Kafka's error, as one line.
    done = gregor(
        "acls", "--add", "--allow-principal", ALICE, "--topic", "t", *servers,
        "--command-config", str(alice), check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
    # Kafka's argument checks: exit status 2, nothing sent.
    for args, says in [
        (["--add", "--topic", "t"], "--allow-principal or --deny-principal"),
        (["--add", "--allow-principal", ALICE], "at least one resource"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "Type:name"),
        (["--add", "--allow-principal", ALICE, "--group", "g", "--operation", "Write"], "GROUP"),
        (["--add", "--allow-principal", ALICE, "--topic", "t", "--operation", "Fly"], "Fly"),
        (["--add", "--allow-principal", ALICE, "--topic", "t", "--resource-pattern-type", "match"],
         "not valid when adding"),
        (["--add", "--allow-principal", ALICE, "--consumer", "--topic", "t"], "--group"),
        (["--list", "--producer", "--topic", "t"], "--list takes no"),
        (["--remove", "--principal", ALICE, "--topic", "t"], "only for --list"),
    ]:  # fmt: skip
        done = gregor("acls", *args, *servers, check=False)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
    # --remove asks first; anything but y removes nothing.
    done = gregor("acls", "--remove", "--topic", "t", *servers, check=False, stdin="n\n")
    assert done.returncode == 1 and "not confirmed" in done.stderr
