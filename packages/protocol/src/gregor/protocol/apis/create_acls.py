"""CreateAcls (key 30): add ACL bindings."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct, V


class AclCreation(Struct):
    resource_type: Int8 = 0
    resource_name: str = ""
    resource_pattern_type: Annotated[Int8, V("1+")] = 3
    principal: str = ""
    host: str = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class CreateAclsRequest(Request, api_key=30, valid="0-3", flexible="2+"):
    creations: list[AclCreation] = []


class AclCreationResult(Struct):
    error_code: Int16 = 0
    error_message: str | None = ""


class CreateAclsResponse(Response, api_key=30, valid="0-3", flexible="2+"):
    throttle_time_ms: Int32 = 0
    results: list[AclCreationResult] = []
