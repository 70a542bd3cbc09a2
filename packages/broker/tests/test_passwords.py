"""Passwords of dynamic broker configs, encrypted as Kafka's PasswordEncoder stores them."""

from __future__ import annotations

import pytest

from gregor.broker.config import BrokerConfig, is_password_config
from gregor.broker.security.passwords import (
    GCM,
    PasswordEncoder,
    decode_passwords,
    encode_passwords,
)
from gregor.protocol.errors import InvalidConfigError

JAAS = "listener.name.sasl_ssl.plain.sasl.jaas.config"
KEY_PASSWORD = "listener.name.ssl.ssl.key.password"
KEYSTORE = "listener.name.ssl.ssl.keystore.location"


def config(**properties: str) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181", **properties}
    )


def test_a_password_is_stored_as_kafka_stores_it_and_decodes_with_the_secret() -> None:
    password = 'PlainLoginModule required user_alice="sécret ☃";'
    encoded = PasswordEncoder("the secret").encode(password)
    fields = dict(item.split(":", 1) for item in encoded.split(","))
    assert set(fields) == {
        "keyFactoryAlgorithm",
        "cipherAlgorithm",
        "keyLength",
        "salt",
        "iterations",
        "encryptedPassword",
        "passwordLength",
        "initializationVector",
    }
    assert fields["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512"
    assert fields["cipherAlgorithm"] == "AES/CBC/PKCS5Padding"
    assert (fields["keyLength"], fields["iterations"]) == ("128", "4096")
    assert fields["passwordLength"] == str(len(password))  # Java's String.length()
    assert "sécret" not in encoded
    assert PasswordEncoder("the secret").decode(encoded) == password
    # A fresh salt and IV each time.
    assert PasswordEncoder("the secret").encode(password) != encoded


def test_the_stored_settings_decode_whatever_the_encoder_now_uses() -> None:
    written = PasswordEncoder("s", "PBKDF2WithHmacSHA1", GCM, 256, 1024).encode("pw")
    assert "authenticationTagLength:128" in written
    assert PasswordEncoder("s").decode(written) == "pw"


def test_another_secret_cannot_decode() -> None:
    encoded = PasswordEncoder("right").encode("pw")
    with pytest.raises(InvalidConfigError, match="Password could not be decoded"):
        PasswordEncoder("wrong").decode(encoded)
    with pytest.raises(InvalidConfigError, match="Password could not be decoded"):
        PasswordEncoder("right").decode("not an encoded password")


def test_only_password_configs_are_encrypted_and_only_with_a_secret() -> None:
    assert is_password_config(JAAS)
    assert is_password_config(KEY_PASSWORD)
    assert is_password_config("listener.name.ssl.ssl.keystore.key")
    assert not is_password_config(KEYSTORE)
    assert not is_password_config("log.retention.ms")
    dynamic = {JAAS: "jaas", KEYSTORE: "/k.pem", "log.retention.ms": "5"}

    with pytest.raises(InvalidConfigError, match="Password encoder secret not configured"):
        encode_passwords(dynamic, is_password_config, config().password_encoder)
    assert encode_passwords({KEYSTORE: "/k.pem"}, is_password_config, None) == {KEYSTORE: "/k.pem"}

    broker = config(**{"password.encoder.secret": "s"})
    stored = encode_passwords(dynamic, is_password_config, broker.password_encoder)
    assert stored[KEYSTORE] == "/k.pem" and stored["log.retention.ms"] == "5"
    assert stored[JAAS] != "jaas"
    assert decode_passwords(stored, is_password_config, broker.password_decoders) == dynamic


def test_the_old_secret_still_decodes_and_what_none_decodes_is_left_out() -> None:
    old = config(**{"password.encoder.secret": "old"})
    stored = encode_passwords({JAAS: "jaas"}, is_password_config, old.password_encoder)
    rotated = config(**{"password.encoder.secret": "new", "password.encoder.old.secret": "old"})
    assert decode_passwords(stored, is_password_config, rotated.password_decoders) == {JAAS: "jaas"}
    other = config(**{"password.encoder.secret": "other"})
    assert decode_passwords(
        {**stored, KEYSTORE: "/k.pem"}, is_password_config, other.password_decoders
    ) == {KEYSTORE: "/k.pem"}


def test_encoder_settings_are_checked() -> None:
    with pytest.raises(InvalidConfigError, match=r"password\.encoder\.key\.length"):
        config(**{"password.encoder.key.length": "100"})
    with pytest.raises(InvalidConfigError, match=r"password\.encoder\.cipher\.algorithm"):
        config(**{"password.encoder.cipher.algorithm": "DES"})
    with pytest.raises(InvalidConfigError, match=r"password\.encoder\.keyfactory\.algorithm"):
        config(**{"password.encoder.keyfactory.algorithm": "MD5"})
    tuned = config(
        **{
            "password.encoder.secret": "s",
            "password.encoder.keyfactory.algorithm": "PBKDF2WithHmacSHA256",
            "password.encoder.key.length": "256",
        }
    ).password_encoder
    assert tuned is not None
    assert "keyFactoryAlgorithm:PBKDF2WithHmacSHA256" in tuned.encode("x")
    assert "keyLength:256" in tuned.encode("x")
