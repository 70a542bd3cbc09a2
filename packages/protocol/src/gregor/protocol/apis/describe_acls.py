"""DescribeAcls (key 29): list the ACLs that match a filter."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct, V


class DescribeAclsRequest(Request, api_key=29, valid="0-3", flexible="2+"):
    resource_type_filter: Int8 = 0
    resource_name_filter: str | None = ""
    pattern_type_filter: Annotated[Int8, V("1+")] = 3
    principal_filter: str | None = ""
    host_filter: str | None = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class AclDescription(Struct):
    principal: str = ""
    host: str = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class DescribeAclsResource(Struct):
    resource_type: Int8 = 0
    resource_name: str = ""
    pattern_type: Annotated[Int8, V("1+")] = 3
    acls: list[AclDescription] = []


class DescribeAclsResponse(Response, api_key=29, valid="0-3", flexible="2+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = ""
    resources: list[DescribeAclsResource] = []
