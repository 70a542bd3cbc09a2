"""Kafka's error codes, and the exceptions of gregor-protocol.

Two families share one root, `ProtocolError`:

- `DecodeError` and `EncodeError`: bytes that do not parse, or values that cannot be written.
  Malformed input never escapes as IndexError, struct.error or UnicodeDecodeError.
- `KafkaError`: one class per Kafka error code, carrying `code`, `retriable` (as Kafka
  defines it) and `invalid_metadata` (the client should refresh its metadata before a retry).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import ClassVar, NoReturn


class ErrorCode(IntEnum):
    """Every error code of the Kafka protocol."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128


class ProtocolError(Exception):
    """Root of every exception gregor-protocol raises."""


class DecodeError(ProtocolError):
    """Bytes that are not a valid encoding of what was expected."""


class EncodeError(ProtocolError):
    """A value that cannot be encoded (wrong type, out of range, unsupported version)."""


class FrameTooLargeError(DecodeError):
    """A length prefix larger than the receiver accepts."""


class KafkaError(ProtocolError):
    """An error a Kafka broker reports by code; subclasses exist for every code."""

    code: ClassVar[int] = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    _by_code: ClassVar[dict[int, type[KafkaError]]] = {}

    def __init_subclass__(
        cls, *, code: int | None = None, retriable: bool = False, invalid_metadata: bool = False
    ) -> None:
        super().__init_subclass__()
        if code is not None:
            cls.code = code
            cls.retriable = retriable
            cls.invalid_metadata = invalid_metadata
            KafkaError._by_code.setdefault(code, cls)

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.default_message())

    @classmethod
    def error_name(cls) -> str:
        """Kafka's name for the code, e.g. ``NOT_LEADER_OR_FOLLOWER``."""
        try:
            return ErrorCode(cls.code).name
        except ValueError:
            return f"UNKNOWN_ERROR_CODE_{cls.code}"

    @classmethod
    def default_message(cls) -> str:
        return f"{cls.error_name()} ({cls.code}): {cls.error_name().lower().replace('_', ' ')}"

    @staticmethod
    def for_code(code: int) -> type[KafkaError]:
        """The exception class for a non-zero code; unknown codes map to a fresh subclass."""
        try:
            return KafkaError._by_code[code]
        except KeyError:
            return type(f"KafkaError{code}", (KafkaError,), {"code": code})


def error_for_code(code: int, message: str | None = None) -> KafkaError | None:
    """The exception for an error code, or None for code 0 (NONE)."""
    return None if code == 0 else KafkaError.for_code(code)(message)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the exception for a non-zero error code; do nothing for 0."""
    if code != 0:
        raise KafkaError.for_code(code)(message)


def fail(code: int, message: str | None = None) -> NoReturn:
    """Raise the exception for an error code that is known to be non-zero."""
    raise KafkaError.for_code(code)(message)


class UnknownServerError(KafkaError, code=ErrorCode.UNKNOWN_SERVER_ERROR):
    pass


class OffsetOutOfRangeError(KafkaError, code=ErrorCode.OFFSET_OUT_OF_RANGE):
    pass


class CorruptMessageError(KafkaError, code=ErrorCode.CORRUPT_MESSAGE, retriable=True):
    pass


class UnknownTopicOrPartitionError(
    KafkaError, code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, retriable=True, invalid_metadata=True
):
    pass


class InvalidFetchSizeError(KafkaError, code=ErrorCode.INVALID_FETCH_SIZE):
    pass


class LeaderNotAvailableError(
    KafkaError, code=ErrorCode.LEADER_NOT_AVAILABLE, retriable=True, invalid_metadata=True
):
    pass


class NotLeaderOrFollowerError(
    KafkaError, code=ErrorCode.NOT_LEADER_OR_FOLLOWER, retriable=True, invalid_metadata=True
):
    pass


class RequestTimedOutError(KafkaError, code=ErrorCode.REQUEST_TIMED_OUT, retriable=True):
    pass


class BrokerNotAvailableError(KafkaError, code=ErrorCode.BROKER_NOT_AVAILABLE):
    pass


class ReplicaNotAvailableError(
    KafkaError, code=ErrorCode.REPLICA_NOT_AVAILABLE, retriable=True, invalid_metadata=True
):
    pass


class MessageTooLargeError(KafkaError, code=ErrorCode.MESSAGE_TOO_LARGE):
    pass


class StaleControllerEpochError(KafkaError, code=ErrorCode.STALE_CONTROLLER_EPOCH):
    pass


class OffsetMetadataTooLargeError(KafkaError, code=ErrorCode.OFFSET_METADATA_TOO_LARGE):
    pass


class NetworkError(
    KafkaError, code=ErrorCode.NETWORK_EXCEPTION, retriable=True, invalid_metadata=True
):
    pass


class CoordinatorLoadInProgressError(
    KafkaError, code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, retriable=True
):
    pass


class CoordinatorNotAvailableError(
    KafkaError, code=ErrorCode.COORDINATOR_NOT_AVAILABLE, retriable=True
):
    pass


class NotCoordinatorError(KafkaError, code=ErrorCode.NOT_COORDINATOR, retriable=True):
    pass


class InvalidTopicError(KafkaError, code=ErrorCode.INVALID_TOPIC_EXCEPTION):
    pass


class RecordListTooLargeError(KafkaError, code=ErrorCode.RECORD_LIST_TOO_LARGE):
    pass


class NotEnoughReplicasError(KafkaError, code=ErrorCode.NOT_ENOUGH_REPLICAS, retriable=True):
    pass


class NotEnoughReplicasAfterAppendError(
    KafkaError, code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, retriable=True
):
    pass


class InvalidRequiredAcksError(KafkaError, code=ErrorCode.INVALID_REQUIRED_ACKS):
    pass


class IllegalGenerationError(KafkaError, code=ErrorCode.ILLEGAL_GENERATION):
    pass


class InconsistentGroupProtocolError(KafkaError, code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL):
    pass


class InvalidGroupIdError(KafkaError, code=ErrorCode.INVALID_GROUP_ID):
    pass


class UnknownMemberIdError(KafkaError, code=ErrorCode.UNKNOWN_MEMBER_ID):
    pass


class InvalidSessionTimeoutError(KafkaError, code=ErrorCode.INVALID_SESSION_TIMEOUT):
    pass


class RebalanceInProgressError(KafkaError, code=ErrorCode.REBALANCE_IN_PROGRESS):
    pass


class InvalidCommitOffsetSizeError(KafkaError, code=ErrorCode.INVALID_COMMIT_OFFSET_SIZE):
    pass


class TopicAuthorizationFailedError(KafkaError, code=ErrorCode.TOPIC_AUTHORIZATION_FAILED):
    pass


class GroupAuthorizationFailedError(KafkaError, code=ErrorCode.GROUP_AUTHORIZATION_FAILED):
    pass


class ClusterAuthorizationFailedError(KafkaError, code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
    pass


class InvalidTimestampError(KafkaError, code=ErrorCode.INVALID_TIMESTAMP):
    pass


class UnsupportedSaslMechanismError(KafkaError, code=ErrorCode.UNSUPPORTED_SASL_MECHANISM):
    pass


class IllegalSaslStateError(KafkaError, code=ErrorCode.ILLEGAL_SASL_STATE):
    pass


class UnsupportedVersionError(KafkaError, code=ErrorCode.UNSUPPORTED_VERSION):
    pass


class TopicAlreadyExistsError(KafkaError, code=ErrorCode.TOPIC_ALREADY_EXISTS):
    pass


class InvalidPartitionsError(KafkaError, code=ErrorCode.INVALID_PARTITIONS):
    pass


class InvalidReplicationFactorError(KafkaError, code=ErrorCode.INVALID_REPLICATION_FACTOR):
    pass


class InvalidReplicaAssignmentError(KafkaError, code=ErrorCode.INVALID_REPLICA_ASSIGNMENT):
    pass


class InvalidConfigError(KafkaError, code=ErrorCode.INVALID_CONFIG):
    pass


class NotControllerError(KafkaError, code=ErrorCode.NOT_CONTROLLER, retriable=True):
    pass


class InvalidRequestError(KafkaError, code=ErrorCode.INVALID_REQUEST):
    pass


class UnsupportedForMessageFormatError(KafkaError, code=ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT):
    pass


class PolicyViolationError(KafkaError, code=ErrorCode.POLICY_VIOLATION):
    pass


class OutOfOrderSequenceNumberError(KafkaError, code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
    pass


class DuplicateSequenceNumberError(KafkaError, code=ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
    pass


class InvalidProducerEpochError(KafkaError, code=ErrorCode.INVALID_PRODUCER_EPOCH):
    pass


class InvalidTxnStateError(KafkaError, code=ErrorCode.INVALID_TXN_STATE):
    pass


class InvalidProducerIdMappingError(KafkaError, code=ErrorCode.INVALID_PRODUCER_ID_MAPPING):
    pass


class InvalidTransactionTimeoutError(KafkaError, code=ErrorCode.INVALID_TRANSACTION_TIMEOUT):
    pass


class ConcurrentTransactionsError(
    KafkaError, code=ErrorCode.CONCURRENT_TRANSACTIONS, retriable=True
):
    pass


class TransactionCoordinatorFencedError(KafkaError, code=ErrorCode.TRANSACTION_COORDINATOR_FENCED):
    pass


class TransactionalIdAuthorizationFailedError(
    KafkaError, code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
):
    pass


class SecurityDisabledError(KafkaError, code=ErrorCode.SECURITY_DISABLED):
    pass


class OperationNotAttemptedError(KafkaError, code=ErrorCode.OPERATION_NOT_ATTEMPTED):
    pass


class KafkaStorageError(
    KafkaError, code=ErrorCode.KAFKA_STORAGE_ERROR, retriable=True, invalid_metadata=True
):
    pass


class LogDirNotFoundError(KafkaError, code=ErrorCode.LOG_DIR_NOT_FOUND):
    pass


class SaslAuthenticationFailedError(KafkaError, code=ErrorCode.SASL_AUTHENTICATION_FAILED):
    pass


class UnknownProducerIdError(KafkaError, code=ErrorCode.UNKNOWN_PRODUCER_ID):
    pass


class ReassignmentInProgressError(KafkaError, code=ErrorCode.REASSIGNMENT_IN_PROGRESS):
    pass


class DelegationTokenAuthDisabledError(KafkaError, code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED):
    pass


class DelegationTokenNotFoundError(KafkaError, code=ErrorCode.DELEGATION_TOKEN_NOT_FOUND):
    pass


class DelegationTokenOwnerMismatchError(KafkaError, code=ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH):
    pass


class DelegationTokenRequestNotAllowedError(
    KafkaError, code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
):
    pass


class DelegationTokenAuthorizationFailedError(
    KafkaError, code=ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
):
    pass


class DelegationTokenExpiredError(KafkaError, code=ErrorCode.DELEGATION_TOKEN_EXPIRED):
    pass


class InvalidPrincipalTypeError(KafkaError, code=ErrorCode.INVALID_PRINCIPAL_TYPE):
    pass


class NonEmptyGroupError(KafkaError, code=ErrorCode.NON_EMPTY_GROUP):
    pass


class GroupIdNotFoundError(KafkaError, code=ErrorCode.GROUP_ID_NOT_FOUND):
    pass


class FetchSessionIdNotFoundError(
    KafkaError, code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, retriable=True
):
    pass


class InvalidFetchSessionEpochError(
    KafkaError, code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, retriable=True
):
    pass


class ListenerNotFoundError(
    KafkaError, code=ErrorCode.LISTENER_NOT_FOUND, retriable=True, invalid_metadata=True
):
    pass


class TopicDeletionDisabledError(KafkaError, code=ErrorCode.TOPIC_DELETION_DISABLED):
    pass


class FencedLeaderEpochError(
    KafkaError, code=ErrorCode.FENCED_LEADER_EPOCH, retriable=True, invalid_metadata=True
):
    pass


class UnknownLeaderEpochError(KafkaError, code=ErrorCode.UNKNOWN_LEADER_EPOCH, retriable=True):
    pass


class UnsupportedCompressionTypeError(KafkaError, code=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
    pass


class StaleBrokerEpochError(KafkaError, code=ErrorCode.STALE_BROKER_EPOCH):
    pass


class OffsetNotAvailableError(KafkaError, code=ErrorCode.OFFSET_NOT_AVAILABLE, retriable=True):
    pass


class MemberIdRequiredError(KafkaError, code=ErrorCode.MEMBER_ID_REQUIRED):
    pass


class PreferredLeaderNotAvailableError(
    KafkaError, code=ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, retriable=True, invalid_metadata=True
):
    pass


class GroupMaxSizeReachedError(KafkaError, code=ErrorCode.GROUP_MAX_SIZE_REACHED):
    pass


class FencedInstanceIdError(KafkaError, code=ErrorCode.FENCED_INSTANCE_ID):
    pass


class EligibleLeadersNotAvailableError(
    KafkaError, code=ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, retriable=True, invalid_metadata=True
):
    pass


class ElectionNotNeededError(
    KafkaError, code=ErrorCode.ELECTION_NOT_NEEDED, retriable=True, invalid_metadata=True
):
    pass


class NoReassignmentInProgressError(KafkaError, code=ErrorCode.NO_REASSIGNMENT_IN_PROGRESS):
    pass


class GroupSubscribedToTopicError(KafkaError, code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC):
    pass


class InvalidRecordError(KafkaError, code=ErrorCode.INVALID_RECORD):
    """Also what a produced batch's records fail with (KIP-467): `record_errors` holds each
    bad record's index in its batch and why, which Produce v8+ answers with."""

    def __init__(
        self, message: str | None = None, record_errors: Sequence[tuple[int, str | None]] = ()
    ) -> None:
        super().__init__(message)
        self.record_errors = tuple(record_errors)

    @classmethod
    def for_records(cls, record_errors: Sequence[tuple[int, str | None]]) -> InvalidRecordError:
        """Kafka's error for these records: its message names the first three."""
        shown = ", ".join(
            f"RecordError(batchIndex={i}, message='{why}')" for i, why in record_errors[:3]
        )
        return cls(
            f"One or more records have been rejected due to {len(record_errors)} record errors "
            f"in total, and only showing the first three errors at most: [{shown}]",
            record_errors,
        )


class UnstableOffsetCommitError(KafkaError, code=ErrorCode.UNSTABLE_OFFSET_COMMIT, retriable=True):
    pass


class ThrottlingQuotaExceededError(
    KafkaError, code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, retriable=True
):
    pass


class ProducerFencedError(KafkaError, code=ErrorCode.PRODUCER_FENCED):
    pass


class ResourceNotFoundError(KafkaError, code=ErrorCode.RESOURCE_NOT_FOUND):
    pass


class DuplicateResourceError(KafkaError, code=ErrorCode.DUPLICATE_RESOURCE):
    pass


class UnacceptableCredentialError(KafkaError, code=ErrorCode.UNACCEPTABLE_CREDENTIAL):
    pass


class InconsistentVoterSetError(KafkaError, code=ErrorCode.INCONSISTENT_VOTER_SET):
    pass


class InvalidUpdateVersionError(KafkaError, code=ErrorCode.INVALID_UPDATE_VERSION):
    pass


class FeatureUpdateFailedError(KafkaError, code=ErrorCode.FEATURE_UPDATE_FAILED):
    pass


class PrincipalDeserializationFailureError(
    KafkaError, code=ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE
):
    pass


class SnapshotNotFoundError(KafkaError, code=ErrorCode.SNAPSHOT_NOT_FOUND):
    pass


class PositionOutOfRangeError(KafkaError, code=ErrorCode.POSITION_OUT_OF_RANGE):
    pass


class UnknownTopicIdError(
    KafkaError, code=ErrorCode.UNKNOWN_TOPIC_ID, retriable=True, invalid_metadata=True
):
    pass


class DuplicateBrokerRegistrationError(KafkaError, code=ErrorCode.DUPLICATE_BROKER_REGISTRATION):
    pass


class BrokerIdNotRegisteredError(KafkaError, code=ErrorCode.BROKER_ID_NOT_REGISTERED):
    pass


class InconsistentTopicIdError(
    KafkaError, code=ErrorCode.INCONSISTENT_TOPIC_ID, retriable=True, invalid_metadata=True
):
    pass


class InconsistentClusterIdError(KafkaError, code=ErrorCode.INCONSISTENT_CLUSTER_ID):
    pass


class TransactionalIdNotFoundError(KafkaError, code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND):
    pass


class FetchSessionTopicIdError(
    KafkaError, code=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, retriable=True
):
    pass


class IneligibleReplicaError(KafkaError, code=ErrorCode.INELIGIBLE_REPLICA):
    pass


class NewLeaderElectedError(KafkaError, code=ErrorCode.NEW_LEADER_ELECTED):
    pass


class OffsetMovedToTieredStorageError(KafkaError, code=ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE):
    pass


class FencedMemberEpochError(KafkaError, code=ErrorCode.FENCED_MEMBER_EPOCH):
    pass


class UnreleasedInstanceIdError(KafkaError, code=ErrorCode.UNRELEASED_INSTANCE_ID):
    pass


class UnsupportedAssignorError(KafkaError, code=ErrorCode.UNSUPPORTED_ASSIGNOR):
    pass


class StaleMemberEpochError(KafkaError, code=ErrorCode.STALE_MEMBER_EPOCH):
    pass


class MismatchedEndpointTypeError(KafkaError, code=ErrorCode.MISMATCHED_ENDPOINT_TYPE):
    pass


class UnsupportedEndpointTypeError(KafkaError, code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE):
    pass


class UnknownControllerIdError(KafkaError, code=ErrorCode.UNKNOWN_CONTROLLER_ID):
    pass


class UnknownSubscriptionIdError(KafkaError, code=ErrorCode.UNKNOWN_SUBSCRIPTION_ID):
    pass


class TelemetryTooLargeError(KafkaError, code=ErrorCode.TELEMETRY_TOO_LARGE):
    pass


class InvalidRegistrationError(KafkaError, code=ErrorCode.INVALID_REGISTRATION):
    pass


class TransactionAbortableError(KafkaError, code=ErrorCode.TRANSACTION_ABORTABLE):
    pass


class InvalidRecordStateError(KafkaError, code=ErrorCode.INVALID_RECORD_STATE):
    pass


class ShareSessionNotFoundError(KafkaError, code=ErrorCode.SHARE_SESSION_NOT_FOUND, retriable=True):
    pass


class InvalidShareSessionEpochError(
    KafkaError, code=ErrorCode.INVALID_SHARE_SESSION_EPOCH, retriable=True
):
    pass


class FencedStateEpochError(KafkaError, code=ErrorCode.FENCED_STATE_EPOCH):
    pass


class InvalidVoterKeyError(KafkaError, code=ErrorCode.INVALID_VOTER_KEY):
    pass


class DuplicateVoterError(KafkaError, code=ErrorCode.DUPLICATE_VOTER):
    pass


class VoterNotFoundError(KafkaError, code=ErrorCode.VOTER_NOT_FOUND):
    pass


class InvalidRegularExpressionError(KafkaError, code=ErrorCode.INVALID_REGULAR_EXPRESSION):
    pass


class CorruptRecordError(DecodeError, CorruptMessageError):
    """Record data that does not parse: a bad CRC, sizes that do not add up, a compressed
    payload that does not decompress. A `DecodeError` that a broker answers with
    CORRUPT_MESSAGE."""
