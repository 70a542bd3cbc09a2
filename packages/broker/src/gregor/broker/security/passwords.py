"""Password-type dynamic broker configs, encrypted in ZooKeeper as Kafka's PasswordEncoder does.

A password set dynamically (a listener's `ssl.key.password`, `ssl.keystore.key`,
`<mechanism>.sasl.jaas.config`, ...) is stored in /config/brokers/<id> encrypted with
`password.encoder.secret`: AES with a key derived from the secret by PBKDF2 over a random
salt. The stored value is Kafka's: a comma-separated map of the ciphertext and everything
but the secret that decrypting it needs (`keyFactoryAlgorithm`, `cipherAlgorithm`,
`keyLength`, `salt`, `iterations`, `initializationVector`, `passwordLength`), so a value
written with other settings still decodes after they change. Without a secret such configs
are refused, as Kafka refuses them.

AES comes from `cryptography` (Python's standard library has no block cipher); PBKDF2 from
hashlib.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gregor.protocol.errors import InvalidConfigError

log = logging.getLogger(__name__)

# Java's names of the key derivations, and the hash each uses.
KEY_FACTORY_ALGORITHMS: Final = {
    "PBKDF2WithHmacSHA512": "sha512",
    "PBKDF2WithHmacSHA256": "sha256",
    "PBKDF2WithHmacSHA1": "sha1",
}
CBC: Final = "AES/CBC/PKCS5Padding"
GCM: Final = "AES/GCM/NoPadding"
CIPHER_ALGORITHMS: Final = (CBC, GCM)
AES_KEY_LENGTHS: Final = (128, 192, 256)
_SALT_BYTES: Final = 256
_GCM_TAG_BITS: Final = 128


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _java_length(text: str) -> int:
    """String.length() in Java: UTF-16 code units (what Kafka stores as passwordLength)."""
    return len(text.encode("utf-16-le")) // 2


@attrs.frozen
class PasswordEncoder:
    """Encrypts with these settings; decrypts with the settings stored in the value."""

    secret: str = attrs.field(repr=False)
    key_factory_algorithm: str = "PBKDF2WithHmacSHA512"
    cipher_algorithm: str = CBC
    key_length: int = 128
    iterations: int = 4096

    def _key(self, algorithm: str, salt: bytes, iterations: int, key_length: int) -> bytes:
        digest = KEY_FACTORY_ALGORITHMS[algorithm]
        secret = self.secret.encode("utf-8")
        return hashlib.pbkdf2_hmac(digest, secret, salt, iterations, key_length // 8)

    def encode(self, password: str) -> str:
        salt = os.urandom(_SALT_BYTES)
        key = self._key(self.key_factory_algorithm, salt, self.iterations, self.key_length)
        plain = password.encode("utf-8")
        params = {
            "keyFactoryAlgorithm": self.key_factory_algorithm,
            "cipherAlgorithm": self.cipher_algorithm,
            "keyLength": str(self.key_length),
            "salt": _b64(salt),
            "iterations": str(self.iterations),
        }
        if self.cipher_algorithm == GCM:
            iv = os.urandom(12)
            encrypted = AESGCM(key).encrypt(iv, plain, None)
            params["authenticationTagLength"] = str(_GCM_TAG_BITS)
        else:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            padded = padder.update(plain) + padder.finalize()
            encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            encrypted = encryptor.update(padded) + encryptor.finalize()
        params["encryptedPassword"] = _b64(encrypted)
        params["passwordLength"] = str(_java_length(password))
        params["initializationVector"] = _b64(iv)
        return ",".join(f"{k}:{v}" for k, v in params.items())

    def decode(self, encoded: str) -> str:
        """The password; InvalidConfigError if this secret cannot decrypt it."""
        try:
            params = dict(item.split(":", 1) for item in encoded.split(","))
            algorithm, cipher = params["keyFactoryAlgorithm"], params["cipherAlgorithm"]
            salt = base64.b64decode(params["salt"], validate=True)
            iv = base64.b64decode(params["initializationVector"], validate=True)
            encrypted = base64.b64decode(params["encryptedPassword"], validate=True)
            key = self._key(algorithm, salt, int(params["iterations"]), int(params["keyLength"]))
            if cipher == GCM:
                plain = AESGCM(key).decrypt(iv, encrypted, None)
            elif cipher == CBC:
                decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                padded = decryptor.update(encrypted) + decryptor.finalize()
                unpadder = padding.PKCS7(128).unpadder()
                plain = unpadder.update(padded) + unpadder.finalize()
            else:
                raise ValueError(f"unknown cipher {cipher}")
            password = plain.decode("utf-8")
            expected = int(params["passwordLength"])
        except (ValueError, KeyError, InvalidTag, UnicodeDecodeError) as exc:
            raise InvalidConfigError(f"Password could not be decoded: {exc!r}") from None
        if _java_length(password) != expected:  # a wrong key that happened to unpad
            raise InvalidConfigError("Password could not be decoded, sanity check of length failed")
        return password


def encode_passwords(
    config: Mapping[str, str], is_password: Callable[[str], bool], encoder: PasswordEncoder | None
) -> dict[str, str]:
    """A dynamic config as it is stored: its passwords encrypted. Without an encoder a
    config holding a password is refused (InvalidConfigError), as Kafka refuses it."""
    out = dict(config)
    for key, value in config.items():
        if is_password(key):
            if encoder is None:
                raise InvalidConfigError("Password encoder secret not configured")
            out[key] = encoder.encode(value)
    return out


def decode_passwords(
    config: Mapping[str, str],
    is_password: Callable[[str], bool],
    encoders: Sequence[PasswordEncoder],
) -> dict[str, str]:
    """A stored dynamic config with its passwords in the clear. A password no encoder (the
    secret, then the old secret) decodes is left out and logged, as Kafka does."""
    out = dict(config)
    for key, value in config.items():
        if not is_password(key):
            continue
        decoded = decode_with(value, encoders)
        if decoded is None:
            log.error("Dynamic password config %s could not be decoded, ignoring.", key)
            del out[key]
        else:
            out[key] = decoded
    return out


def decode_with(value: str, encoders: Sequence[PasswordEncoder]) -> str | None:
    for encoder in encoders:
        try:
            return encoder.decode(value)
        except InvalidConfigError:
            continue
    return None
