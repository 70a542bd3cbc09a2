"""KafkaJS (Node.js) over SSL with a client certificate, SASL_PLAINTEXT/PLAIN and
SASL_SSL/SCRAM-SHA-512; a wrong password refused with KafkaJSSASLAuthenticationError, a CA
that did not sign the brokers with Node's TLS verification error."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic
from gregor_testing.security import USERS, Pki, wrong_ca_refused

INTEROP = Path(__file__).resolve().parents[1] / "interop"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (INTEROP / "node_modules" / "kafkajs").is_dir(),
    reason="KafkaJS is not installed (infra/setup.sh installs it into tests/interop)",
)


def kafkajs(
    cluster: LocalCluster,
    pki: Pki,
    mode: str,
    topic: str,
    count: int,
    password: str,
    *,
    bootstrap: str | None = None,
    ca: Path | None = None,
) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [
            "node",
            str(INTEROP / "kafkajs_security.js"),
            bootstrap or cluster.bootstrap_servers_of(mode),
            topic,
            str(count),
            mode,
            str(ca or pki.ca),
            str(pki.client_certificate),
            str(pki.client_key),
            "alice",
            password,
        ],
        capture_output=True,
        timeout=120,
        check=False,
        cwd=INTEROP,
    )
    assert done.returncode in (0, 2), done.stderr.decode(errors="replace")
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("mode", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_kafkajs_produces_and_consumes(secure_cluster: LocalCluster, pki: Pki, mode: str) -> None:
    topic = unique_topic("kjs")
    create_topic(secure_cluster, topic, partitions=1, replication_factor=3)
    code, result = kafkajs(secure_cluster, pki, mode, topic, 100, USERS["alice"])
    assert code == 0, result
    assert result["consumed"] == [f"{mode} {i}" for i in range(100)]


@pytest.mark.parametrize("mode", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kafkajs_wrong_password(secure_cluster: LocalCluster, pki: Pki, mode: str) -> None:
    code, result = kafkajs(secure_cluster, pki, mode, unique_topic(), 1, "wrong")
    assert code == 2
    assert result["error"] == "KafkaJSSASLAuthenticationError", result


def test_kafkajs_wrong_ca(secure_cluster: LocalCluster, pki: Pki) -> None:
    with wrong_ca_refused(secure_cluster, pki) as address:
        code, result = kafkajs(
            secure_cluster, pki, "SSL", unique_topic(), 1, "", bootstrap=address, ca=pki.other_ca
        )
    # KafkaJS retries the connection, then gives up with Node's verification error.
    assert code == 2
    assert result["error"] == "KafkaJSNumberOfRetriesExceeded", result
    assert result["message"] == "Connection error: self-signed certificate in certificate chain"
