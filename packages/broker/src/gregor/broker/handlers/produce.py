"""Produce: record batches appended to partition leaders.

v3 and later carry v2 batches, appended as received (validated, offsets patched in place).
v0-v2 carry legacy message sets, converted to one v2 batch per partition first. With acks=0
there is no response; if anything failed, the connection is closed instead, as Kafka does,
so the producer notices and refreshes its metadata.
"""

from __future__ import annotations

import logging

from gregor.broker.apis import (
    CloseConnection,
    Later,
    RequestContext,
    answer_when_done,
    handles,
)
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.replica_manager import ProduceResult
from gregor.broker.txn_verification import VerificationGuard
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.produce import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from gregor.protocol.compression import Compression
from gregor.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    UnsupportedCompressionTypeError,
)
from gregor.protocol.legacy import message_set_to_batch
from gregor.protocol.records import BATCH_HEADER_SIZE, BatchHeader, read_batch_header

log = logging.getLogger(__name__)

_MAGIC_AT = 16


Records = bytes | bytearray | memoryview


def check_records(records: object, version: int) -> Records:
    """The records of one partition as the log takes them: v2 batches.

    Raises Kafka's per-partition errors: INVALID_RECORD for anything but v2 batches from v3
    on, UNSUPPORTED_COMPRESSION_TYPE for zstd before v7, CORRUPT_MESSAGE for a message set
    that cannot be read.
    """
    if not isinstance(records, bytes | bytearray | memoryview) or not len(records):
        raise InvalidRecordError(
            f"Produce v{version} needs at least one record batch per partition"
        )
    if version >= 3:
        if len(records) < BATCH_HEADER_SIZE or records[_MAGIC_AT] != 2:
            raise InvalidRecordError(
                f"Produce requests with version {version} are only allowed to contain record "
                "batches with magic version 2"
            )
        if version < 7 and read_batch_header(records).compression == Compression.ZSTD:
            raise UnsupportedCompressionTypeError(
                f"Produce requests with version {version} are not allowed to use ZStandard "
                "compression"
            )
        return records
    if len(records) > _MAGIC_AT and records[_MAGIC_AT] == 2:
        return records
    try:
        return message_set_to_batch(records)
    except CorruptRecordError:
        raise
    except KafkaError as exc:
        raise CorruptRecordError(f"cannot read the message set: {exc}") from exc


@handles(ApiKey.PRODUCE, "0-11")
async def produce(
    ctx: RequestContext, request: ProduceRequest, version: int
) -> ProduceResponse | Later | None:
    entries = {}
    invalid: dict[tuple[str, int], ProduceResult] = {}
    # Kafka's rule: transactional batches need a transactional id the client may write.
    txn_refused = _has_transactional_records(request) and (
        request.transactional_id is None
        or not ctx.authorized(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        )
    )
    for topic in request.topic_data:
        refused = (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            if txn_refused
            else None
            if ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, topic.name)
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        for data in topic.partition_data:
            key = (topic.name, data.index)
            if refused is not None:
                invalid[key] = ProduceResult(refused)
                continue
            try:
                entries[key] = check_records(data.records, version)
            except KafkaError as exc:
                invalid[key] = ProduceResult(exc.code, message=str(exc))
    guards: dict[tuple[str, int], VerificationGuard] = {}
    if request.transactional_id is not None and entries:
        unverified, guards = await _verify_transactions(ctx, request.transactional_id, entries)
        for key, error in unverified.items():
            del entries[key]
            invalid[key] = ProduceResult(
                error,
                message="the partition is not in the producer's ongoing transaction"
                if error == ErrorCode.INVALID_TXN_STATE
                else None,
            )
    if request.acks not in (-1, 0, 1):
        results = {
            key: ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS) for key in [*entries, *invalid]
        }
    else:
        appended = ctx.services.replica_manager.append(entries, request.acks, txn_guards=guards)
        appended.results.update(invalid)
        if appended.waiting:
            # acks=all: the appends are done; the answer waits for the ISR, in its turn.
            return answer_when_done(
                appended.replication(request.timeout_ms), lambda done: _response(done, version)
            )
        results = appended.results
    if request.acks == 0:
        failed = [f"{t}-{p}: {r.error}" for (t, p), r in results.items() if r.error]
        if failed:
            raise CloseConnection(f"a Produce with acks=0 failed ({', '.join(failed)})")
        return None
    return _response(results, version)


def _has_transactional_records(request: ProduceRequest) -> bool:
    for topic in request.topic_data:
        for data in topic.partition_data:
            records = data.records
            if (
                isinstance(records, bytes | bytearray | memoryview)
                and len(records) >= BATCH_HEADER_SIZE
                and records[_MAGIC_AT] == 2
                and read_batch_header(records).is_transactional
            ):
                return True
    return False


async def _verify_transactions(
    ctx: RequestContext, transactional_id: str, entries: dict[tuple[str, int], Records]
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], VerificationGuard]]:
    """The partitions whose transactional batch the coordinator did not confirm, and the
    guards of those it was asked about (each append presents its own).

    Only a batch that would start a transaction on its partition is asked about (KIP-890
    part 1); one of a transaction already ongoing there is appended without a round trip.
    """
    guards: dict[tuple[str, int], VerificationGuard] = {}
    first: BatchHeader | None = None
    for key, records in entries.items():
        header = read_batch_header(records)
        if not header.is_transactional:
            continue
        partition = ctx.services.replica_manager.partition(*key)
        if partition is None or not partition.is_leader:
            continue  # the append answers NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION
        guard = partition.start_txn_verification(header.producer_id)
        if guard is not None:
            guards[key] = guard
            first = first or header
    if first is None:
        return {}, guards
    errors = await ctx.services.txn_verifier.verify(
        transactional_id, first.producer_id, first.producer_epoch, list(guards)
    )
    return {key: error for key, error in errors.items() if error != ErrorCode.NONE}, guards


def _response(results: dict[tuple[str, int], ProduceResult], version: int) -> ProduceResponse:
    by_topic: dict[str, list[PartitionProduceResponse]] = {}
    for (topic, index), result in results.items():
        by_topic.setdefault(topic, []).append(
            PartitionProduceResponse(
                index=index,
                error_code=result.error,
                base_offset=result.base_offset,
                log_append_time_ms=result.log_append_time,
                log_start_offset=result.log_start_offset,
                record_errors=[
                    BatchIndexAndErrorMessage(i, why) for i, why in result.record_errors
                ],
                error_message=result.message if result.error != ErrorCode.NONE else None,
            )
        )
    return ProduceResponse(
        responses=[TopicProduceResponse(name, parts) for name, parts in by_topic.items()]
    )
