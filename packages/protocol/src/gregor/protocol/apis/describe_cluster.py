"""DescribeCluster (key 60): cluster id, controller and brokers."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct, V


class DescribeClusterRequest(Request, api_key=60, valid="0-1", flexible="0+"):
    include_cluster_authorized_operations: bool = False
    endpoint_type: Annotated[Int8, V("1+")] = 1


class DescribeClusterBroker(Struct):
    broker_id: Int32 = 0
    host: str = ""
    port: Int32 = 0
    rack: str | None = None


class DescribeClusterResponse(Response, api_key=60, valid="0-1", flexible="0+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    endpoint_type: Annotated[Int8, V("1+")] = 1
    cluster_id: str = ""
    controller_id: Int32 = -1
    brokers: list[DescribeClusterBroker] = []
    cluster_authorized_operations: Int32 = -2147483648
