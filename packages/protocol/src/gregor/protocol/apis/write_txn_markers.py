"""WriteTxnMarkers (key 27): the transaction coordinator has leaders write commit/abort markers."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct


class WritableTxnMarkerTopic(Struct):
    name: str = ""
    partition_indexes: list[Int32] = []


class WritableTxnMarker(Struct):
    producer_id: Int64 = 0
    producer_epoch: Int16 = 0
    transaction_result: bool = False
    topics: list[WritableTxnMarkerTopic] = []
    coordinator_epoch: Int32 = 0


class WriteTxnMarkersRequest(Request, api_key=27, valid="0-1", flexible="1+"):
    markers: list[WritableTxnMarker] = []


class WritableTxnMarkerPartitionResult(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class WritableTxnMarkerTopicResult(Struct):
    name: str = ""
    partitions: list[WritableTxnMarkerPartitionResult] = []


class WritableTxnMarkerResult(Struct):
    producer_id: Int64 = 0
    topics: list[WritableTxnMarkerTopicResult] = []


class WriteTxnMarkersResponse(Response, api_key=27, valid="0-1", flexible="1+"):
    markers: list[WritableTxnMarkerResult] = []
