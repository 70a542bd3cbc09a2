"""JoinGroup (key 11): a member joins a consumer group and takes part in a rebalance."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct, V


class JoinGroupRequestProtocol(Struct):
    name: str = ""
    metadata: bytes = b""


class JoinGroupRequest(Request, api_key=11, valid="0-9", flexible="6+"):
    group_id: str = ""
    session_timeout_ms: Int32 = 0
    rebalance_timeout_ms: Annotated[Int32, V("1+", ignorable=True)] = -1
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("5+")] = None
    protocol_type: str = ""
    protocols: list[JoinGroupRequestProtocol] = []
    reason: Annotated[str | None, V("8+", ignorable=True)] = None


class JoinGroupResponseMember(Struct):
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("5+", ignorable=True)] = None
    metadata: bytes = b""


class JoinGroupResponse(Response, api_key=11, valid="0-9", flexible="6+"):
    throttle_time_ms: Annotated[Int32, V("2+", ignorable=True)] = 0
    error_code: Int16 = 0
    generation_id: Int32 = -1
    protocol_type: Annotated[str | None, V("7+", ignorable=True)] = None
    protocol_name: Annotated[str | None, V(nullable="7+")] = ""
    leader: str = ""
    skip_assignment: Annotated[bool, V("9+")] = False
    member_id: str = ""
    members: list[JoinGroupResponseMember] = []
