"""DescribeGroups (key 15): state, protocol and members of consumer groups."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct, V


class DescribeGroupsRequest(Request, api_key=15, valid="0-5", flexible="5+"):
    groups: list[str] = []
    include_authorized_operations: Annotated[bool, V("3+")] = False


class DescribedGroupMember(Struct):
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("4+", ignorable=True)] = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


class DescribedGroup(Struct):
    error_code: Int16 = 0
    group_id: str = ""
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedGroupMember] = []
    authorized_operations: Annotated[Int32, V("3+")] = -2147483648


class DescribeGroupsResponse(Response, api_key=15, valid="0-5", flexible="5+"):
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    groups: list[DescribedGroup] = []
