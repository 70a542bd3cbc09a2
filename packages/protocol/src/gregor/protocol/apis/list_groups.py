"""ListGroups (key 16): the consumer groups a broker coordinates."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct, V


class ListGroupsRequest(Request, api_key=16, valid="0-5", flexible="3+"):
    states_filter: Annotated[list[str], V("4+")] = []
    types_filter: Annotated[list[str], V("5+")] = []


class ListedGroup(Struct):
    group_id: str = ""
    protocol_type: str = ""
    group_state: Annotated[str, V("4+", ignorable=True)] = ""
    group_type: Annotated[str, V("5+", ignorable=True)] = ""


class ListGroupsResponse(Response, api_key=16, valid="0-5", flexible="3+"):
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    error_code: Int16 = 0
    groups: list[ListedGroup] = []
