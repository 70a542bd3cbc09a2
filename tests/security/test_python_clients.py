"""kafka-python and aiokafka over SSL with client certificates, SASL_PLAINTEXT with PLAIN
and SASL_SSL with SCRAM-SHA-512; a wrong password and a CA that did not sign the brokers
refused with each client's error."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.errors import KafkaConnectionError as AioConnectionError
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import KafkaTimeoutError

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic
from gregor_testing.security import USERS, Pki, wrong_ca_refused

MODES = ["SSL", "SASL_PLAINTEXT", "SASL_SSL"]
COUNT = 100


def kafka_python_security(
    pki: Pki, mode: str, password: str, ca: Path | None = None
) -> dict[str, Any]:
    conf: dict[str, Any] = {"security_protocol": mode}
    if mode in ("SSL", "SASL_SSL"):
        conf["ssl_cafile"] = str(ca or pki.ca)
    if mode == "SSL":
        conf |= {"ssl_certfile": str(pki.client_certificate), "ssl_keyfile": str(pki.client_key)}
    else:
        conf |= {
            "sasl_mechanism": "PLAIN" if mode == "SASL_PLAINTEXT" else "SCRAM-SHA-512",
            "sasl_plain_username": "alice",
            "sasl_plain_password": password,
        }
    return conf


def aiokafka_security(pki: Pki, mode: str, password: str, ca: Path | None = None) -> dict[str, Any]:
    conf = kafka_python_security(pki, mode, password, ca)
    cafile = conf.pop("ssl_cafile", None)
    certfile, keyfile = conf.pop("ssl_certfile", None), conf.pop("ssl_keyfile", None)
    if cafile is not None:
        context = ssl.create_default_context(cafile=cafile)
        if certfile is not None:
            context.load_cert_chain(certfile, keyfile)
        conf["ssl_context"] = context
    return conf


@pytest.mark.parametrize("mode", MODES)
def test_kafka_python(secure_cluster: LocalCluster, pki: Pki, mode: str) -> None:
    topic = unique_topic("kp")
    create_topic(secure_cluster, topic, partitions=1, replication_factor=3)
    conf = {
        "bootstrap_servers": secure_cluster.bootstrap_servers_of(mode),
        **kafka_python_security(pki, mode, USERS["alice"]),
    }
    producer = KafkaProducer(acks="all", enable_idempotence=False, **conf)
    try:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(COUNT)]
        producer.flush(30)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(10)
    assert offsets == list(range(COUNT))
    consumer = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=10_000, **conf)
    try:
        consumer.assign([KpTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        seen = []
        for message in consumer:
            seen.append((message.offset, message.key, message.value))
            if len(seen) == COUNT:
                break
    finally:
        consumer.close()
    assert seen == [(i, b"k%d" % i, b"v%d" % i) for i in range(COUNT)]


WRONG_PASSWORD = {
    "SASL_PLAINTEXT": "Authentication failed: Invalid username or password",
    "SASL_SSL": "Authentication failed during authentication due to invalid credentials with "
    "SASL mechanism SCRAM-SHA-512",
}


# A refusal is logged on the first attempt; kafka-python 3 bootstraps for
# bootstrap_timeout_ms (30 s by default), whatever max_block_ms says.
FAIL_FAST = {"max_block_ms": 5_000}
if "bootstrap_timeout_ms" in KafkaProducer.DEFAULT_CONFIG:
    FAIL_FAST["bootstrap_timeout_ms"] = 5_000


@pytest.mark.parametrize("mode", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kafka_python_wrong_password(
    secure_cluster: LocalCluster, pki: Pki, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python fails to bootstrap, logging the broker's SASL_AUTHENTICATION_FAILED."""
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(
            bootstrap_servers=secure_cluster.bootstrap_servers_of(mode),
            **FAIL_FAST,
            **kafka_python_security(pki, mode, "wrong"),
        )
    assert "[Error 58] SaslAuthenticationFailedError" in caplog.text
    assert WRONG_PASSWORD[mode] in caplog.text


@pytest.mark.parametrize("mode", MODES)
def test_aiokafka(secure_cluster: LocalCluster, pki: Pki, mode: str) -> None:
    topic = unique_topic("aio")
    create_topic(secure_cluster, topic, partitions=1, replication_factor=3)
    conf = {
        "bootstrap_servers": secure_cluster.bootstrap_servers_of(mode),
        **aiokafka_security(pki, mode, USERS["alice"]),
    }

    async def run() -> list[tuple[int, bytes | None, bytes | None]]:
        producer = AIOKafkaProducer(acks="all", **conf)
        await producer.start()
        try:
            sent = [
                await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i)
                for i in range(COUNT)
            ]
        finally:
            await producer.stop()
        assert [r.offset for r in sent] == list(range(COUNT))
        consumer = AIOKafkaConsumer(enable_auto_commit=False, **conf)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list[tuple[int, bytes | None, bytes | None]] = []
            while len(out) < COUNT:
                batches = await consumer.getmany(tp, timeout_ms=10_000)
                assert batches, f"nothing after {len(out)} records"
                out += [(m.offset, m.key, m.value) for m in batches[tp]]
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [(i, b"k%d" % i, b"v%d" % i) for i in range(COUNT)]


@pytest.mark.parametrize("mode", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_aiokafka_wrong_password(
    secure_cluster: LocalCluster, pki: Pki, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """aiokafka's start() fails to bootstrap, logging the broker's answer."""

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=secure_cluster.bootstrap_servers_of(mode),
            **aiokafka_security(pki, mode, "wrong"),
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(AioConnectionError, match="Unable to bootstrap"):
        asyncio.run(run())
    assert "[Error 58] SaslAuthenticationFailed" in caplog.text
    assert WRONG_PASSWORD[mode] in caplog.text


def test_kafka_python_wrong_ca(
    secure_cluster: LocalCluster, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python fails to bootstrap, logging OpenSSL's verification failure."""
    with (
        wrong_ca_refused(secure_cluster, pki) as address,
        pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"),
    ):
        KafkaProducer(
            bootstrap_servers=address,
            **FAIL_FAST,
            **kafka_python_security(pki, "SSL", "", ca=pki.other_ca),
        )
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text


def test_aiokafka_wrong_ca(
    secure_cluster: LocalCluster, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """aiokafka's start() fails to bootstrap, logging OpenSSL's verification failure."""

    async def run(address: str) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=address,
            request_timeout_ms=10_000,
            **aiokafka_security(pki, "SSL", "", ca=pki.other_ca),
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with (
        wrong_ca_refused(secure_cluster, pki) as address,
        pytest.raises(AioConnectionError, match="Unable to bootstrap"),
    ):
        asyncio.run(run(address))
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
