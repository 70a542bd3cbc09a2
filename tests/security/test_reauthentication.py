"""Re-authentication (KIP-368) on a broker whose SASL sessions live a few seconds:
`listener.name.sasl_plaintext.plain.connections.max.reauth.ms` for PLAIN on SASL_PLAINTEXT,
the broker-wide `connections.max.reauth.ms` elsewhere.

On the wire: the final SaslAuthenticate answer carries the lifetime; a SaslHandshake on the
live connection re-authenticates it behind a request still in flight; a changed principal or
mechanism is refused as Kafka refuses it; a request after expiry closes the connection.
With real clients: librdkafka, kafka-python, KafkaJS and gregor-client (so the brokers' own
connections too) re-authenticate while producing, every record delivered once; aiokafka does
not, so its connection is closed at expiry and it reconnects, and loses nothing either.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer as CkProducer
from kafka import KafkaProducer

from gregor.client import Producer
from gregor.client.security import SaslCredentials, ScramClient
from gregor.devcluster import LocalCluster, ZooKeeper
from gregor.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from gregor.protocol.apis.metadata import MetadataRequest
from gregor.protocol.apis.sasl_authenticate import SaslAuthenticateRequest
from gregor.protocol.apis.sasl_handshake import SaslHandshakeRequest
from gregor.protocol.errors import ErrorCode
from gregor_testing.cluster import (
    WireClient,
    create_topic,
    log_mark,
    unique_topic,
    wait_for,
    wait_for_log,
)
from gregor_testing.security import USERS, Pki, running_secure_cluster

PLAIN_LIFETIME_MS = 3000
DEFAULT_LIFETIME_MS = 4000


@pytest.fixture(scope="module")
def reauth_cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeper,
    pki: Pki,
) -> Iterator[LocalCluster]:
    lifetimes = {
        "connections.max.reauth.ms": str(DEFAULT_LIFETIME_MS),
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": str(PLAIN_LIFETIME_MS),
    }
    directory = tmp_path_factory.mktemp("reauth")
    with running_secure_cluster(request, directory, zookeeper, pki, 1, lifetimes) as cluster:
        yield cluster


def plain_token(user: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + USERS[user].encode()


def authenticate(conn: WireClient, user: str = "alice", mechanism: str = "PLAIN") -> Any:
    """SaslHandshake v1 and SaslAuthenticate v2 with PLAIN: the final answer."""
    handshake = conn.request(SaslHandshakeRequest(mechanism), 1)
    assert handshake.error_code == 0
    return conn.request(SaslAuthenticateRequest(plain_token(user)), 2)


def wire(cluster: LocalCluster) -> WireClient:
    return WireClient(cluster.broker(0), listener="SASL_PLAINTEXT", timeout=30)


def test_the_lifetime_is_per_listener_and_mechanism(reauth_cluster: LocalCluster) -> None:
    with wire(reauth_cluster) as conn:
        answer = authenticate(conn)
        assert (answer.error_code, answer.session_lifetime_ms) == (0, PLAIN_LIFETIME_MS)
    # SCRAM on the same listener has no override of its own: the broker's value.
    with wire(reauth_cluster) as conn:
        assert conn.request(SaslHandshakeRequest("SCRAM-SHA-256"), 1).error_code == 0
        client = ScramClient(SaslCredentials("SCRAM-SHA-256", "bob", USERS["bob"]))
        first = conn.request(SaslAuthenticateRequest(client.first()), 2)
        final_token = client.respond(first.auth_bytes)
        assert final_token is not None
        final = conn.request(SaslAuthenticateRequest(final_token), 2)
        assert (final.error_code, final.session_lifetime_ms) == (0, DEFAULT_LIFETIME_MS)


def test_reauthentication_on_the_wire(reauth_cluster: LocalCluster) -> None:
    topic = unique_topic("reauth")
    create_topic(reauth_cluster, topic)
    broker = reauth_cluster.broker(0)
    with wire(reauth_cluster) as conn:
        authenticate(conn)
        # A Fetch long poll in flight, then the re-authentication: answered in order.
        conn.send(fetch(topic, wait_ms=500), 12)
        fetch_correlation = conn.correlation
        conn.send(SaslHandshakeRequest("PLAIN"), 1)
        conn.send(SaslAuthenticateRequest(plain_token("alice")), 2)
        answers = [conn.receive(api, version) for api, version in ((1, 12), (17, 1), (36, 2))]
        assert [c for c, _ in answers] == [fetch_correlation + i for i in range(3)]
        fetched, handshake, reauthenticated = (a for _, a in answers)
        assert fetched.error_code == 0 and handshake.error_code == 0
        assert reauthenticated.error_code == 0
        assert reauthenticated.session_lifetime_ms == PLAIN_LIFETIME_MS
        assert conn.request(MetadataRequest(topics=[]), 9).brokers

    # Another principal: refused with Kafka's message, and closed.
    with wire(reauth_cluster) as conn:
        authenticate(conn)
        wait_for(lambda: reauth_allowed(conn), 10, "a second after the authentication")
        refused = conn.request(SaslAuthenticateRequest(plain_token("bob")), 2)
        assert refused.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert refused.error_message == (
            "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert conn.closed_by_broker()

    # Another mechanism: the handshake is answered, the next token refused and closed.
    with wire(reauth_cluster) as conn:
        authenticate(conn)
        mark = log_mark(broker)
        wait_for(
            lambda: conn.request(SaslHandshakeRequest("SCRAM-SHA-256"), 1).error_code == 0,
            10,
            "a second after the authentication",
        )
        conn.send(SaslAuthenticateRequest(b"n,,n=alice,r=abc"), 2)
        assert conn.closed_by_broker()
        wait_for_log(broker, "not supported for re-authentication of mechanism 'PLAIN'", mark)

    # No re-authentication: the first request after the lifetime closes the connection.
    with wire(reauth_cluster) as conn:
        mark = log_mark(broker)
        authenticate(conn)
        started = time.monotonic()
        wait_for(lambda: not answers_metadata(conn), 30, "the session to expire")
        closed_after = time.monotonic() - started
        try:
            wait_for_log(broker, "its SASL session expired (User:alice", mark, timeout=10)
        except TimeoutError:
            tail = "\n".join(log_lines(reauth_cluster, mark)[-20:])
            raise AssertionError(f"closed after {closed_after:.1f}s, log:\n{tail}") from None


def reauth_allowed(conn: WireClient) -> bool:
    """A SaslHandshake for PLAIN that starts a re-authentication (else ILLEGAL_SASL_STATE)."""
    return conn.request(SaslHandshakeRequest("PLAIN"), 1).error_code == 0


def answers_metadata(conn: WireClient) -> bool:
    try:
        conn.request(MetadataRequest(topics=[]), 9)
    except (ConnectionError, OSError):
        return False
    return True


def fetch(topic: str, wait_ms: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=wait_ms,
        min_bytes=1,
        topics=[FetchTopic(topic=topic, partitions=[FetchPartition(0, fetch_offset=0)])],
    )


# -- real clients -------------------------------------------------------------------------


def log_lines(cluster: LocalCluster, since: int) -> list[str]:
    return cluster.broker(0).log_path.read_bytes()[since:].decode(errors="replace").splitlines()


def reauthentications(cluster: LocalCluster, since: int, listener: str) -> int:
    """alice's re-authentications on the listener (the brokers' own are User:broker)."""
    return sum(
        f"re-authenticated {listener}-" in line and line.endswith(" as User:alice")
        for line in log_lines(cluster, since)
    )


def expirations(cluster: LocalCluster, since: int, user: str = "alice") -> int:
    return sum(
        f"its SASL session expired (User:{user}" in line for line in log_lines(cluster, since)
    )


def test_librdkafka_reauthenticates_while_producing(reauth_cluster: LocalCluster) -> None:
    topic = unique_topic("ck-reauth")
    create_topic(reauth_cluster, topic)
    mark = log_mark(reauth_cluster.broker(0))
    producer = CkProducer(
        {
            "bootstrap.servers": reauth_cluster.bootstrap_servers_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": USERS["alice"],
            "linger.ms": 5,
        }
    )
    reports: list[tuple[int, int]] = []
    sent = 0
    try:
        deadline = time.monotonic() + 60
        # Produce steadily until the producer's connections re-authenticated twice.
        while reauthentications(reauth_cluster, mark, "SASL_PLAINTEXT") < 2:
            assert time.monotonic() < deadline, "librdkafka did not re-authenticate"
            producer.produce(
                topic,
                b"v%d" % sent,
                on_delivery=lambda err, msg: reports.append(
                    (err.code() if err else 0, msg.offset())
                ),
            )
            sent += 1
            producer.poll(0.02)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    assert [code for code, _ in reports if code] == []
    assert sorted(offset for _, offset in reports) == list(range(sent))
    assert expirations(reauth_cluster, mark) == 0


def test_kafka_python_reauthenticates_while_producing(
    reauth_cluster: LocalCluster, pki: Pki
) -> None:
    """SCRAM-SHA-512 over SASL_SSL, with the broker-wide lifetime."""
    topic = unique_topic("kp-reauth")
    create_topic(reauth_cluster, topic)
    mark = log_mark(reauth_cluster.broker(0))
    producer = KafkaProducer(
        bootstrap_servers=reauth_cluster.bootstrap_servers_of("SASL_SSL"),
        security_protocol="SASL_SSL",
        ssl_cafile=str(pki.ca),
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"],
        acks="all",
    )
    offsets: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while reauthentications(reauth_cluster, mark, "SASL_SSL") < 2:
            assert time.monotonic() < deadline, "kafka-python did not re-authenticate"
            offsets.append(producer.send(topic, b"v").get(timeout=30).offset)
    finally:
        producer.close(10)
    assert offsets == list(range(len(offsets)))
    assert expirations(reauth_cluster, mark) == 0


def test_aiokafka_is_closed_at_expiry_and_reconnects(reauth_cluster: LocalCluster) -> None:
    """aiokafka has no KIP-368: the broker closes its connection at the first request after
    the session's lifetime; it reconnects, authenticates afresh, and every record lands once."""
    topic = unique_topic("aio-reauth")
    create_topic(reauth_cluster, topic)
    mark = log_mark(reauth_cluster.broker(0))

    async def run() -> list[int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=reauth_cluster.bootstrap_servers_of("SASL_PLAINTEXT"),
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password=USERS["alice"],
            acks="all",
        )
        await producer.start()
        offsets: list[int] = []
        try:
            deadline = time.monotonic() + 60
            while expirations(reauth_cluster, mark) < 2:
                assert time.monotonic() < deadline, "the broker closed no expired session"
                offsets.append((await producer.send_and_wait(topic, b"v")).offset)
            # And on, over the new connection.
            offsets += [(await producer.send_and_wait(topic, b"v")).offset for _ in range(10)]
        finally:
            await producer.stop()
        return offsets

    offsets = asyncio.run(run())
    assert offsets == list(range(len(offsets)))
    assert reauthentications(reauth_cluster, mark, "SASL_PLAINTEXT") == 0


def test_gregor_client_reauthenticates_while_producing(
    reauth_cluster: LocalCluster, pki: Pki
) -> None:
    """SCRAM-SHA-512 over SASL_SSL; the broker's own connections (User:broker over SASL_SSL,
    the controller's among them) renew theirs too and are never closed for it."""
    topic = unique_topic("gregor-reauth")
    create_topic(reauth_cluster, topic)
    mark = log_mark(reauth_cluster.broker(0))
    conf = {
        "bootstrap.servers": reauth_cluster.bootstrap_servers_of("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": USERS["alice"],
        "acks": "all",
    }
    offsets: list[int] = []
    with Producer(conf) as producer:
        deadline = time.monotonic() + 60
        while reauthentications(reauth_cluster, mark, "SASL_SSL") < 2:
            assert time.monotonic() < deadline, "gregor-client did not re-authenticate"
            offsets.append(producer.produce(topic, b"v").result(30).offset)
    assert offsets == list(range(len(offsets)))
    assert expirations(reauth_cluster, mark) == 0
    assert expirations(reauth_cluster, mark, "broker") == 0


INTEROP = Path(__file__).resolve().parents[1] / "interop"


@pytest.mark.skipif(
    shutil.which("node") is None or not (INTEROP / "node_modules" / "kafkajs").is_dir(),
    reason="KafkaJS is not installed (infra/setup.sh installs it into tests/interop)",
)
def test_kafkajs_reauthenticates_while_producing(reauth_cluster: LocalCluster) -> None:
    """KafkaJS re-authenticates before a request once its session is within
    `reauthenticationThreshold` of its lifetime (here 1.5 s of PLAIN's 3 s)."""
    topic = unique_topic("kjs-reauth")
    create_topic(reauth_cluster, topic)
    mark = log_mark(reauth_cluster.broker(0))
    node = subprocess.Popen(
        [
            "node",
            str(INTEROP / "kafkajs_reauth.js"),
            reauth_cluster.bootstrap_servers_of("SASL_PLAINTEXT"),
            topic,
            "alice",
            USERS["alice"],
            str(PLAIN_LIFETIME_MS // 2),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=INTEROP,
    )
    try:
        wait_for(
            lambda: (
                reauthentications(reauth_cluster, mark, "SASL_PLAINTEXT") >= 2
                or node.poll() is not None
            ),
            60,
            "KafkaJS to re-authenticate twice",
        )
        out, err = node.communicate(b"stop\n", timeout=60)
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
    assert node.returncode == 0, err.decode(errors="replace")
    offsets = json.loads(out)["offsets"]
    assert offsets == list(range(len(offsets)))
    assert reauthentications(reauth_cluster, mark, "SASL_PLAINTEXT") >= 2
    assert expirations(reauth_cluster, mark) == 0
