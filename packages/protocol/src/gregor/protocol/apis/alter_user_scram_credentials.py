"""AlterUserScramCredentials (key 51): add or remove users' SCRAM credentials."""

from __future__ import annotations

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct


class ScramCredentialDeletion(Struct):
    name: str = ""
    mechanism: Int8 = 0


class ScramCredentialUpsertion(Struct):
    name: str = ""
    mechanism: Int8 = 0
    iterations: Int32 = 0
    salt: bytes = b""
    salted_password: bytes = b""


class AlterUserScramCredentialsRequest(Request, api_key=51, valid="0", flexible="0+"):
    deletions: list[ScramCredentialDeletion] = []
    upsertions: list[ScramCredentialUpsertion] = []


class AlterUserScramCredentialsResult(Struct):
    user: str = ""
    error_code: Int16 = 0
    error_message: str | None = ""


class AlterUserScramCredentialsResponse(Response, api_key=51, valid="0", flexible="0+"):
    throttle_time_ms: Int32 = 0
    results: list[AlterUserScramCredentialsResult] = []
