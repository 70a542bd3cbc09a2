"""kcat over SSL with a client certificate, SASL_PLAINTEXT/PLAIN and SASL_SSL/SCRAM-SHA-512
(librdkafka's -X settings); a wrong password and a CA that did not sign the brokers refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic
from gregor_testing.security import USERS, Pki, wrong_ca_refused

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


def settings(
    pki: Pki, mode: str, password: str = USERS["alice"], ca: Path | None = None
) -> list[str]:
    conf = {"security.protocol": mode}
    if mode in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(ca or pki.ca)
    if mode == "SSL":
        conf["ssl.certificate.location"] = str(pki.client_certificate)
        conf["ssl.key.location"] = str(pki.client_key)
    else:
        conf["sasl.mechanisms"] = "PLAIN" if mode == "SASL_PLAINTEXT" else "SCRAM-SHA-512"
        conf["sasl.username"] = "alice"
        conf["sasl.password"] = password
    return [arg for key, value in conf.items() for arg in ("-X", f"{key}={value}")]


def kcat(cluster: LocalCluster, mode: str, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["kcat", "-b", cluster.bootstrap_servers_of(mode), *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


@pytest.mark.parametrize("mode", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_kcat_produces_and_consumes(secure_cluster: LocalCluster, pki: Pki, mode: str) -> None:
    topic = unique_topic("kcat")
    create_topic(secure_cluster, topic, partitions=1, replication_factor=3)
    values = [f"{mode}-{i}" for i in range(100)]
    security = settings(pki, mode)
    kcat(secure_cluster, mode, *security, "-P", "-t", topic, stdin="\n".join(values).encode())
    out = kcat(secure_cluster, mode, *security, "-C", "-t", topic, "-o", "beginning", "-e")
    assert out.splitlines() == values


def test_kcat_wrong_password(secure_cluster: LocalCluster, pki: Pki) -> None:
    done = subprocess.run(
        [
            "kcat",
            "-b",
            secure_cluster.bootstrap_servers_of("SASL_SSL"),
            *settings(pki, "SASL_SSL", password="wrong"),
            "-L",
            "-m",
            "10",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Authentication failed" in done.stderr.decode(errors="replace")


def test_kcat_wrong_ca(secure_cluster: LocalCluster, pki: Pki) -> None:
    with wrong_ca_refused(secure_cluster, pki) as address:
        done = subprocess.run(
            ["kcat", "-b", address, *settings(pki, "SSL", ca=pki.other_ca), "-L", "-m", "10"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert done.returncode != 0
    assert "certificate verify failed" in done.stderr.decode(errors="replace")
