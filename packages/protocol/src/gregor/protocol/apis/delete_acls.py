"""DeleteAcls (key 31): remove the ACLs that match filters."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct, V


class DeleteAclsFilter(Struct):
    resource_type_filter: Int8 = 0
    resource_name_filter: str | None = ""
    pattern_type_filter: Annotated[Int8, V("1+")] = 3
    principal_filter: str | None = ""
    host_filter: str | None = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class DeleteAclsRequest(Request, api_key=31, valid="0-3", flexible="2+"):
    filters: list[DeleteAclsFilter] = []


class DeleteAclsMatchingAcl(Struct):
    error_code: Int16 = 0
    error_message: str | None = ""
    resource_type: Int8 = 0
    resource_name: str = ""
    pattern_type: Annotated[Int8, V("1+")] = 3
    principal: str = ""
    host: str = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class DeleteAclsFilterResult(Struct):
    error_code: Int16 = 0
    error_message: str | None = ""
    matching_acls: list[DeleteAclsMatchingAcl] = []


class DeleteAclsResponse(Response, api_key=31, valid="0-3", flexible="2+"):
    throttle_time_ms: Int32 = 0
    filter_results: list[DeleteAclsFilterResult] = []
