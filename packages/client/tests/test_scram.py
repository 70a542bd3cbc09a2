"""gregor-client's SCRAM exchange (RFC 5802/7677) against scramp's server side: the
messages a broker expects, and a server that cannot prove it knows the password (a wrong
signature in server-final) is refused with SaslAuthenticationFailedError."""

from __future__ import annotations

import base64

import pytest
import scramp

from gregor.client.security import SaslCredentials, ScramClient
from gregor.protocol.errors import SaslAuthenticationFailedError


def server(mechanism: str, password: str) -> scramp.ScramServer:
    scram = scramp.ScramMechanism(mechanism)
    salt, stored, key, iterations = scram.make_auth_info(password, iteration_count=4096)
    return scram.make_server(lambda _user: (salt, stored, key, iterations))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_exchange_completes_with_a_server_that_knows_the_password(mechanism: str) -> None:
    client = ScramClient(SaslCredentials(mechanism, "alice", "alice-secret"))
    s = server(mechanism, "alice-secret")
    first = client.first()
    assert first.startswith(b"n,,n=alice,r=")
    s.set_client_first(first.decode())
    final = client.respond(s.get_server_first().encode())
    assert final is not None and b",p=" in final
    s.set_client_final(final.decode())
    assert client.respond(s.get_server_final().encode()) is None


def test_a_server_signature_that_does_not_match_is_refused() -> None:
    client = ScramClient(SaslCredentials("SCRAM-SHA-256", "alice", "alice-secret"))
    s = server("SCRAM-SHA-256", "alice-secret")
    s.set_client_first(client.first().decode())
    final = client.respond(s.get_server_first().encode())
    assert final is not None
    forged = b"v=" + base64.b64encode(b"\0" * 32)  # not the server key's signature
    with pytest.raises(SaslAuthenticationFailedError):
        client.respond(forged)
