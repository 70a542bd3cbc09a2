"""DescribeUserScramCredentials (key 50): which SCRAM mechanisms each user has credentials for."""

from __future__ import annotations

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct


class UserName(Struct):
    name: str = ""


class DescribeUserScramCredentialsRequest(Request, api_key=50, valid="0", flexible="0+"):
    users: list[UserName] | None = []


class CredentialInfo(Struct):
    mechanism: Int8 = 0
    iterations: Int32 = 0


class DescribeUserScramCredentialsResult(Struct):
    user: str = ""
    error_code: Int16 = 0
    error_message: str | None = ""
    credential_infos: list[CredentialInfo] = []


class DescribeUserScramCredentialsResponse(Response, api_key=50, valid="0", flexible="0+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = ""
    results: list[DescribeUserScramCredentialsResult] = []
