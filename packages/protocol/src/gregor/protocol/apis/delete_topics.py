"""DeleteTopics (key 20): delete topics by name or id."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct, V


class DeleteTopicState(Struct):
    name: Annotated[str | None, V("6+")] = None
    topic_id: Annotated[UUID, V("6+")] = UUID(int=0)


class DeleteTopicsRequest(Request, api_key=20, valid="0-6", flexible="4+"):
    topics: Annotated[list[DeleteTopicState], V("6+")] = []
    topic_names: Annotated[list[str], V("0-5", ignorable=True)] = []
    timeout_ms: Int32 = 0


class DeletableTopicResult(Struct):
    name: Annotated[str | None, V(nullable="6+")] = ""
    topic_id: Annotated[UUID, V("6+", ignorable=True)] = UUID(int=0)
    error_code: Int16 = 0
    error_message: Annotated[str | None, V("5+", ignorable=True)] = None


class DeleteTopicsResponse(Response, api_key=20, valid="0-6", flexible="4+"):
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    responses: list[DeletableTopicResult] = []
