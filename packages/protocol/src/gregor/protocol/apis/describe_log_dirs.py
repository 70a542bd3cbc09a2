"""DescribeLogDirs (key 35): a broker's log directories and the replicas on them."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class DescribableLogDirTopic(Struct):
    topic: str = ""
    partitions: list[Int32] = []


class DescribeLogDirsRequest(Request, api_key=35, valid="0-4", flexible="2+"):
    topics: list[DescribableLogDirTopic] | None = []


class DescribeLogDirsPartition(Struct):
    partition_index: Int32 = 0
    partition_size: Int64 = 0
    offset_lag: Int64 = 0
    is_future_key: bool = False


class DescribeLogDirsTopic(Struct):
    name: str = ""
    partitions: list[DescribeLogDirsPartition] = []


class DescribeLogDirsResult(Struct):
    error_code: Int16 = 0
    log_dir: str = ""
    topics: list[DescribeLogDirsTopic] = []
    total_bytes: Annotated[Int64, V("4+", ignorable=True)] = -1
    usable_bytes: Annotated[Int64, V("4+", ignorable=True)] = -1


class DescribeLogDirsResponse(Response, api_key=35, valid="0-4", flexible="2+"):
    throttle_time_ms: Int32 = 0
    error_code: Annotated[Int16, V("3+", ignorable=True)] = 0
    results: list[DescribeLogDirsResult] = []
