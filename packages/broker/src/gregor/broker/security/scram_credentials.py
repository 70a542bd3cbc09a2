"""SCRAM credentials as Kafka keeps them: in ZooKeeper at `/config/users/<user>`, one entity
config entry per mechanism,

    {"version":1,"config":{"SCRAM-SHA-512":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

(Kafka's ScramCredentialUtils format), so `kafka-configs.sh --zookeeper ... --alter
--add-config 'SCRAM-SHA-512=[password=...]'` and Gregor read and write the same znodes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

import attrs
import scramp

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS = 4096  # Kafka's floor for both mechanisms
MAX_ITERATIONS = 16384  # and its ceiling
# The mechanisms' numbers in DescribeUserScramCredentials and AlterUserScramCredentials.
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@attrs.frozen
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        """ValueError if `text` is not Kafka's format."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of an AlterUserScramCredentials upsertion (RFC 5802's keys from
        the salted password the client computed)."""
        digest = _HASHES[mechanism]
        client_key = hmac.digest(salted_password, b"Client Key", digest)
        stored_key = hashlib.new(digest, client_key).digest()
        server_key = hmac.digest(salted_password, b"Server Key", digest)
        return cls(salt, stored_key, server_key, iterations)

    @classmethod
    def create(
        cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS
    ) -> ScramCredential:
        salt, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations
        )
        return cls(salt, stored_key, server_key, count)


def user_entity(user: str) -> str:
    """The znode name of a user, sanitized as Kafka's Sanitizer does (URL-encoded)."""
    return urllib.parse.quote(user, safe="-_.~")


def entity_user(entity: str) -> str:
    """The user a /config/users znode name stands for."""
    return urllib.parse.unquote(entity)
