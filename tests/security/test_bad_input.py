"""Bad input on TLS and SASL listeners, on the wire: garbage before the TLS handshake, SASL
requests out of order, an oversized SASL token, a wrong password, an unknown mechanism, a
replayed SCRAM exchange. Each is refused as Kafka refuses it and its connection closed;
other connections go on and the broker stays up. An idle TLS connection is closed too.
Also the exchanges Kafka clients use: SaslHandshake v0 with bare tokens, and
SaslAuthenticate v0 to v2."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.client.security import SaslCredentials, ScramClient
from gregor.devcluster import LocalCluster, ZooKeeper
from gregor.protocol.apis.api_versions import ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.metadata import MetadataRequest, MetadataResponse
from gregor.protocol.apis.sasl_authenticate import SaslAuthenticateRequest
from gregor.protocol.apis.sasl_handshake import SaslHandshakeRequest
from gregor.protocol.errors import ErrorCode
from gregor_testing.cluster import WireClient
from gregor_testing.security import USERS, Pki, mtls_context, running_secure_cluster

PLAIN_TOKEN = b"\0alice\0" + USERS["alice"].encode()


@pytest.fixture
def broker_stays_up(secure_cluster: LocalCluster, pki: Pki) -> Iterator[None]:
    """After the test: the broker still answers, on PLAINTEXT and through a full SASL_SSL
    authentication."""
    yield
    broker = secure_cluster.broker(0)
    with WireClient(broker) as plain:
        response = plain.request(ApiVersionsRequest(), 2)
        assert response.error_code == 0
    with WireClient(broker, listener="SASL_SSL", ssl_context=client_context(pki)) as conn:
        authenticate_plain(conn)
        assert isinstance(conn.request(MetadataRequest(topics=[]), 9), MetadataResponse)


def client_context(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca))


def authenticate_plain(conn: WireClient, version: int = 2) -> None:
    handshake = conn.request(SaslHandshakeRequest("PLAIN"), 1)
    assert handshake.error_code == 0
    assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    answer = conn.request(SaslAuthenticateRequest(PLAIN_TOKEN), version)
    assert (answer.error_code, answer.auth_bytes) == (0, b"")


def sasl(cluster: LocalCluster) -> WireClient:
    return WireClient(cluster.broker(0), listener="SASL_PLAINTEXT", timeout=10)


@pytest.mark.usefixtures("broker_stays_up")
def test_garbage_before_the_tls_handshake(secure_cluster: LocalCluster, pki: Pki) -> None:
    broker = secure_cluster.broker(0)
    for garbage in (
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00",  # plaintext ApiVersions
        b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",  # a truncated, malformed ClientHello
    ):
        with WireClient(broker, listener="SSL", timeout=10) as conn:
            conn.sock.sendall(garbage)
            assert conn.closed_by_broker()
    # TLS itself still works there (mTLS: a client certificate is required).
    context = client_context(pki)
    context.load_cert_chain(str(pki.client_certificate), str(pki.client_key))
    with WireClient(broker, listener="SSL", ssl_context=context) as conn:
        assert conn.request(ApiVersionsRequest(), 2).error_code == 0


@pytest.mark.usefixtures("broker_stays_up")
def test_requests_out_of_order_close_the_connection(secure_cluster: LocalCluster) -> None:
    # Before the handshake, only ApiVersions and SaslHandshake: no answer, closed.
    for request, version in (
        (MetadataRequest(topics=[]), 9),
        (SaslAuthenticateRequest(PLAIN_TOKEN), 2),
    ):
        with sasl(secure_cluster) as conn:
            conn.send(request, version)
            assert conn.closed_by_broker()
    # ApiVersions once only.
    with sasl(secure_cluster) as conn:
        assert conn.request(ApiVersionsRequest(), 2).error_code == 0
        conn.send(ApiVersionsRequest(), 2)
        assert conn.closed_by_broker()
    # After SaslHandshake v1, only SaslAuthenticate: another handshake is answered
    # ILLEGAL_SASL_STATE, other requests closed without an answer.
    with sasl(secure_cluster) as conn:
        assert conn.request(SaslHandshakeRequest("PLAIN"), 1).error_code == 0
        again = conn.request(SaslHandshakeRequest("PLAIN"), 1)
        assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert conn.closed_by_broker()
    with sasl(secure_cluster) as conn:
        assert conn.request(SaslHandshakeRequest("PLAIN"), 1).error_code == 0
        conn.send(MetadataRequest(topics=[]), 9)
        assert conn.closed_by_broker()


@pytest.mark.usefixtures("broker_stays_up")
def test_an_oversized_sasl_token_closes_the_connection(secure_cluster: LocalCluster) -> None:
    """Above sasl.server.max.receive.size (512 KiB) before authentication."""
    with sasl(secure_cluster) as conn:
        assert conn.request(SaslHandshakeRequest("PLAIN"), 1).error_code == 0
        conn.sock.sendall((600_000).to_bytes(4, "big") + b"\0" * 1000)
        assert conn.closed_by_broker()


@pytest.mark.usefixtures("broker_stays_up")
def test_wrong_password_and_unknown_mechanism_are_answered_then_closed(
    secure_cluster: LocalCluster,
) -> None:
    with sasl(secure_cluster) as conn:
        assert conn.request(SaslHandshakeRequest("PLAIN"), 1).error_code == 0
        answer = conn.request(SaslAuthenticateRequest(b"\0alice\0wrong"), 2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert conn.closed_by_broker()
    with sasl(secure_cluster) as conn:
        answer = conn.request(SaslHandshakeRequest("GSSAPI"), 1)
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert conn.closed_by_broker()


@pytest.mark.usefixtures("broker_stays_up")
def test_a_replayed_scram_exchange_is_refused(secure_cluster: LocalCluster) -> None:
    """The server's nonce is new on each connection: a recorded client-final message (its
    proof bound to the old nonce) does not authenticate again."""
    client = ScramClient(SaslCredentials("SCRAM-SHA-512", "alice", USERS["alice"]))
    with sasl(secure_cluster) as conn:
        assert conn.request(SaslHandshakeRequest("SCRAM-SHA-512"), 1).error_code == 0
        first = client.first()
        server_first = conn.request(SaslAuthenticateRequest(first), 2)
        assert server_first.error_code == 0
        final = client.respond(server_first.auth_bytes)
        assert final is not None
        server_final = conn.request(SaslAuthenticateRequest(final), 2)
        assert server_final.error_code == 0
        assert client.respond(server_final.auth_bytes) is None  # the server proved itself
        assert isinstance(conn.request(MetadataRequest(topics=[]), 9), MetadataResponse)
    with sasl(secure_cluster) as conn:
        assert conn.request(SaslHandshakeRequest("SCRAM-SHA-512"), 1).error_code == 0
        assert conn.request(SaslAuthenticateRequest(first), 2).error_code == 0
        replayed = conn.request(SaslAuthenticateRequest(final), 2)
        assert replayed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert replayed.error_message == (
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-512"
        )
        assert conn.closed_by_broker()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_sasl_authenticate_versions(secure_cluster: LocalCluster, version: int) -> None:
    with sasl(secure_cluster) as conn:
        assert conn.request(ApiVersionsRequest(), 2).error_code == 0
        authenticate_plain(conn, version)
        assert isinstance(conn.request(MetadataRequest(topics=[]), 9), MetadataResponse)
        # After authentication, SASL requests are answered ILLEGAL_SASL_STATE, as Kafka does.
        assert conn.request(SaslHandshakeRequest("PLAIN"), 1).error_code == (
            ErrorCode.ILLEGAL_SASL_STATE
        )


def test_sasl_handshake_v0_with_bare_tokens(secure_cluster: LocalCluster) -> None:
    """The pre-KIP-152 exchange: after SaslHandshake v0 the token is a bare size-prefixed
    frame, and so is the answer (empty for PLAIN)."""
    with sasl(secure_cluster) as conn:
        assert conn.request(SaslHandshakeRequest("PLAIN"), 0).error_code == 0
        conn.sock.sendall(len(PLAIN_TOKEN).to_bytes(4, "big") + PLAIN_TOKEN)
        assert conn.exactly(4) == b"\0\0\0\0"
        response = conn.request(ApiVersionsRequest(), 2)
        assert isinstance(response, ApiVersionsResponse)
        assert {k.api_key for k in response.api_keys} >= {17, 36}
    with sasl(secure_cluster) as conn:  # a wrong password: closed without an answer
        assert conn.request(SaslHandshakeRequest("PLAIN"), 0).error_code == 0
        token = b"\0alice\0wrong"
        conn.sock.sendall(len(token).to_bytes(4, "big") + token)
        assert conn.closed_by_broker()


def test_an_idle_tls_connection_is_closed(
    request: pytest.FixtureRequest, tmp_path: Path, zookeeper: ZooKeeper, pki: Pki
) -> None:
    """connections.max.idle.ms on a TLS listener: after its answer, a connection that sends
    nothing more is closed; one that keeps asking is not (the idle close wakes the wait
    for the next request, through the TLS stream)."""
    idle = {"connections.max.idle.ms": "1000"}
    with running_secure_cluster(request, tmp_path, zookeeper, pki, 1, idle) as cluster:
        broker = cluster.broker(0)
        with (
            WireClient(broker, listener="SSL", ssl_context=mtls_context(pki)) as quiet,
            WireClient(broker, listener="SSL", ssl_context=mtls_context(pki)) as busy,
        ):
            assert quiet.request(ApiVersionsRequest(), 2).error_code == 0
            began = time.monotonic()
            while time.monotonic() - began < 2.5:  # past the idle time, asking all along
                assert busy.request(ApiVersionsRequest(), 2).error_code == 0
                time.sleep(0.2)
            assert quiet.closed_by_broker()
            assert busy.request(ApiVersionsRequest(), 2).error_code == 0
