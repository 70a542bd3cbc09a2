"""ControlledShutdown (key 7): a stopping broker asks the controller to move its leaders away."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class ControlledShutdownRequest(Request, api_key=7, valid="0-3", flexible="3+"):
    broker_id: Int32 = 0
    broker_epoch: Annotated[Int64, V("2+", ignorable=True)] = -1


class RemainingPartition(Struct):
    topic_name: str = ""
    partition_index: Int32 = 0


class ControlledShutdownResponse(Response, api_key=7, valid="0-3", flexible="3+"):
    error_code: Int16 = 0
    remaining_partitions: list[RemainingPartition] = []
