"""Kafka's ZooKeeper layout: every znode path and the JSON each one holds.

Pure functions and frozen values, no I/O, so the byte-level format is testable on its own and
identical to what a ZooKeeper-mode Kafka cluster writes (compact JSON, the same keys and
versions), which keeps Kafka's tools and Gregor interchangeable on one ZooKeeper.

Decoding is strict: data that is not what Kafka writes raises `ZNodeDataError` naming the path
and the content, never KeyError or json.JSONDecodeError.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeVar

import attrs

T = TypeVar("T")

# -- the paths ---------------------------------------------------------------------------

CONTROLLER: Final = "/controller"
CONTROLLER_EPOCH: Final = "/controller_epoch"
BROKERS: Final = "/brokers"
BROKER_IDS: Final = "/brokers/ids"
BROKER_SEQUENCE_ID: Final = "/brokers/seqid"
TOPICS: Final = "/brokers/topics"
CONFIG: Final = "/config"
CONFIG_CHANGES: Final = "/config/changes"
CONFIG_CHANGE_PREFIX: Final = "config_change_"
ADMIN: Final = "/admin"
DELETE_TOPICS: Final = "/admin/delete_topics"
REASSIGN_PARTITIONS: Final = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION: Final = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION: Final = "/isr_change_notification"
ISR_CHANGE_PREFIX: Final = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION: Final = "/log_dir_event_notification"
CLUSTER_ID: Final = "/cluster/id"
PRODUCER_ID_BLOCK: Final = "/latest_producer_id_block"
CONSUMERS: Final = "/consumers"

# Entity types under /config, as Kafka names them.
CONFIG_TOPICS: Final = "topics"
CONFIG_BROKERS: Final = "brokers"
CONFIG_CLIENTS: Final = "clients"
CONFIG_USERS: Final = "users"
CONFIG_IPS: Final = "ips"
CONFIG_ENTITY_TYPES: Final = (
    CONFIG_TOPICS,
    CONFIG_CLIENTS,
    CONFIG_USERS,
    CONFIG_BROKERS,
    CONFIG_IPS,
)
DEFAULT_ENTITY: Final = "<default>"  # the broker-wide default entity, /config/brokers/<default>

# Created (empty) at broker startup when missing, as Kafka does.
PERSISTENT_PATHS: Final = (
    CONSUMERS,
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQUENCE_ID,
    ISR_CHANGE_NOTIFICATION,
    PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    *(f"{CONFIG}/{entity_type}" for entity_type in CONFIG_ENTITY_TYPES),
)

NO_LEADER: Final = -1
LEADER_DURING_DELETE: Final = -2  # the leader UpdateMetadata announces for a topic being deleted
EPOCH_DURING_DELETE: Final = -2
NO_EPOCH: Final = -1
PRODUCER_ID_BLOCK_SIZE: Final = 1000


class ZNodeDataError(ValueError):
    """A znode holds data that is not what Kafka writes there."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def group_by_topic(items: Iterable[tuple[str, T]]) -> list[tuple[str, list[T]]]:
    """Items grouped under their topic, topics in name order, items in their given order."""
    grouped: dict[str, list[T]] = {}
    for topic, item in items:
        grouped.setdefault(topic, []).append(item)
    return sorted(grouped.items())


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(tp: TopicPartition) -> str:
    return f"{TOPICS}/{tp.topic}/partitions/{tp.partition}"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{TOPICS}/{tp.topic}/partitions/{tp.partition}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def config_entity_path(entity_type: str, entity_name: str) -> str:
    return f"{CONFIG}/{entity_type}/{entity_name}"


def isr_change_path(sequence_number: str = "") -> str:
    return f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}{sequence_number}"


def sequence_number(node_name: str, prefix: str) -> str:
    """The sequence number ZooKeeper appended to a sequential node's name."""
    return node_name[len(prefix) :] if node_name.startswith(prefix) else node_name


# -- JSON helpers ------------------------------------------------------------------------


def _encode(value: Any) -> bytes:
    # Jackson's compact form, as Kafka writes it.
    return json.dumps(value, separators=(",", ":")).encode()


def _decode(data: bytes | None, what: str) -> dict[str, Any]:
    if not data:
        raise ZNodeDataError(f"{what} is empty")
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZNodeDataError(f"{what} is not JSON: {data[:200]!r}") from exc
    if not isinstance(value, dict):
        raise ZNodeDataError(f"{what} is not a JSON object: {data[:200]!r}")
    return value


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = obj.get(key)
    # bool is an int in Python; JSON true is never a broker id or an epoch.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ZNodeDataError(f"{what}: {key!r} is {value!r}, expected {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ZNodeDataError(f"{what}: expected a list of integers, got {value!r}")
    return tuple(value)


def _int_text(obj: Mapping[str, Any], key: str, what: str) -> int:
    """An integer Kafka writes as a JSON string (timestamps, producer ids)."""
    value = obj.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(_field(obj, key, str, what))
    except ValueError:
        raise ZNodeDataError(f"{what}: {key!r} is {value!r}, expected an integer") from None


def _now_ms() -> str:
    return str(int(time.time() * 1000))


# -- topic ids: Kafka's Uuid text form ----------------------------------------------------


def topic_id_to_text(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_text(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raise ZNodeDataError(f"{text!r} is not a base64 topic id") from None
    if len(raw) != 16:
        raise ZNodeDataError(f"{text!r} is not a base64 topic id (16 bytes)")
    return uuid.UUID(bytes=raw)


def new_topic_id() -> uuid.UUID:
    """A random topic id, avoiding what Kafka reserves (0, 1) and text that starts with '-'."""
    while True:
        candidate = uuid.uuid4()
        if candidate.int > 1 and not topic_id_to_text(candidate).startswith("-"):
            return candidate


# -- /controller and /controller_epoch ------------------------------------------------------


def encode_controller(broker_id: int) -> bytes:
    return _encode(
        {"version": 2, "brokerid": broker_id, "timestamp": _now_ms(), "kraftControllerEpoch": -1}
    )


def decode_controller(data: bytes | None) -> int:
    obj = _decode(data, CONTROLLER)
    return int(_field(obj, "brokerid", int, CONTROLLER))


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode())
    except (ValueError, UnicodeDecodeError):
        raise ZNodeDataError(f"{CONTROLLER_EPOCH} holds {data!r}, not an integer") from None


# -- /brokers/ids/N ------------------------------------------------------------------------

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's numeric ids for them (UpdateMetadata carries the number).
SECURITY_PROTOCOL_IDS: Final = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@attrs.frozen
class BrokerEndpoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@attrs.frozen
class BrokerRegistration:
    """What a broker publishes about itself in its ephemeral znode."""

    id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


def encode_broker(broker: BrokerRegistration, jmx_port: int = -1) -> bytes:
    # Older clients read the top-level host/port: the first PLAINTEXT endpoint, if any.
    plaintext = next((e for e in broker.endpoints if e.security_protocol == "PLAINTEXT"), None)
    obj: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": {
            e.listener: e.security_protocol for e in broker.endpoints
        },
        "endpoints": [e.connection_string for e in broker.endpoints],
        "jmx_port": jmx_port,
        "port": plaintext.port if plaintext else -1,
        "host": plaintext.host if plaintext else None,
        "version": 5,
        "timestamp": _now_ms(),
    }
    if broker.rack is not None:
        obj["rack"] = broker.rack
    return _encode(obj)


def _parse_endpoint(text: str, protocols: Mapping[str, str], what: str) -> BrokerEndpoint:
    listener, sep, address = text.partition("://")
    host, colon, port_text = address.rpartition(":")
    if not sep or not colon or not port_text.isdigit():
        raise ZNodeDataError(f"{what}: endpoint {text!r} is not LISTENER://host:port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    protocol = protocols.get(listener, listener)
    if protocol not in SECURITY_PROTOCOLS:
        raise ZNodeDataError(f"{what}: listener {listener!r} has no known security protocol")
    return BrokerEndpoint(listener, host, int(port_text), protocol)


def decode_broker(broker_id: int, data: bytes | None) -> BrokerRegistration:
    what = broker_path(broker_id)
    obj = _decode(data, what)
    version = _field(obj, "version", int, what)
    rack = obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise ZNodeDataError(f"{what}: rack is {rack!r}, expected a string")
    if version == 1:
        endpoint = BrokerEndpoint(
            "PLAINTEXT", _field(obj, "host", str, what), _field(obj, "port", int, what)
        )
        return BrokerRegistration(broker_id, (endpoint,), rack)
    protocols = obj.get("listener_security_protocol_map") or {}
    if not isinstance(protocols, dict):
        raise ZNodeDataError(f"{what}: listener_security_protocol_map is not an object")
    texts = _field(obj, "endpoints", list, what)
    endpoints = tuple(_parse_endpoint(str(t), protocols, what) for t in texts)
    return BrokerRegistration(broker_id, endpoints, rack)


# -- /brokers/topics/T ---------------------------------------------------------------------


@attrs.frozen
class ReplicaAssignment:
    """A partition's replicas; while it is reassigned, also what is being added and removed.

    `replicas` lists the target replicas first, then the original ones being removed, so
    the origin and target sets are recoverable after a controller failover.
    """

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        full = tuple(dict.fromkeys([*target, *self.origin_replicas]))
        origin = set(self.origin_replicas)
        return ReplicaAssignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in set(target)),
        )

    def remove_replica(self, replica: int) -> ReplicaAssignment:
        return ReplicaAssignment(
            tuple(r for r in self.replicas if r != replica),
            tuple(r for r in self.adding if r != replica),
            tuple(r for r in self.removing if r != replica),
        )


@attrs.frozen
class TopicAssignment:
    topic: str
    topic_id: uuid.UUID | None
    partitions: Mapping[int, ReplicaAssignment]


def encode_topic(topic_id: uuid.UUID | None, partitions: Mapping[int, ReplicaAssignment]) -> bytes:
    ordered = sorted(partitions.items())
    obj: dict[str, Any] = {
        "partitions": {str(p): list(a.replicas) for p, a in ordered},
        "adding_replicas": {str(p): list(a.adding) for p, a in ordered if a.adding},
        "removing_replicas": {str(p): list(a.removing) for p, a in ordered if a.removing},
        "version": 3,
    }
    if topic_id is not None:
        obj["topic_id"] = topic_id_to_text(topic_id)
    return _encode(obj)


def decode_topic(topic: str, data: bytes | None) -> TopicAssignment:
    what = topic_path(topic)
    obj = _decode(data, what)
    id_text = obj.get("topic_id")
    topic_id = topic_id_from_text(id_text) if isinstance(id_text, str) else None
    partitions = obj.get("partitions") or {}
    adding = obj.get("adding_replicas") or {}
    removing = obj.get("removing_replicas") or {}
    if not all(isinstance(x, dict) for x in (partitions, adding, removing)):
        raise ZNodeDataError(f"{what}: partitions and their changes must be objects")
    result: dict[int, ReplicaAssignment] = {}
    for key, replicas in partitions.items():
        if not key.isdigit():
            raise ZNodeDataError(f"{what}: partition {key!r} is not a number")
        result[int(key)] = ReplicaAssignment(
            _int_list(replicas, f"{what} partition {key}"),
            _int_list(adding.get(key, []), f"{what} adding {key}"),
            _int_list(removing.get(key, []), f"{what} removing {key}"),
        )
    return TopicAssignment(topic, topic_id, result)


# -- /brokers/topics/T/partitions/P/state --------------------------------------------------


@attrs.frozen
class LeaderAndIsr:
    """A partition's leadership as its state znode holds it.

    `zk_version` is the znode version this state was read at or written as (Kafka's
    "partition epoch"); every update is a compare-and-set against it.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0
    leader_recovery_state: int = 0  # 0: RECOVERED, 1: RECOVERING

    def new_leader_and_isr(
        self, leader: int, isr: Iterable[int], controller_epoch: int
    ) -> LeaderAndIsr:
        return attrs.evolve(
            self,
            leader=leader,
            leader_epoch=self.leader_epoch + 1,
            isr=tuple(isr),
            controller_epoch=controller_epoch,
        )

    def new_epoch(self, controller_epoch: int) -> LeaderAndIsr:
        return self.new_leader_and_isr(self.leader, self.isr, controller_epoch)

    def same_as(self, other: LeaderAndIsr) -> bool:
        """Equal in everything the znode holds (the zk version aside)."""
        return attrs.evolve(self, zk_version=0) == attrs.evolve(other, zk_version=0)


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    obj: dict[str, Any] = {
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "version": 1,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    }
    if state.leader_recovery_state != 0:
        obj["leader_recovery_state"] = state.leader_recovery_state
    return _encode(obj)


def decode_partition_state(tp: TopicPartition, data: bytes | None, zk_version: int) -> LeaderAndIsr:
    what = partition_state_path(tp)
    obj = _decode(data, what)
    recovery = obj.get("leader_recovery_state", 0)
    if not isinstance(recovery, int) or recovery not in (0, 1):
        raise ZNodeDataError(f"{what}: leader_recovery_state is {recovery!r}")
    return LeaderAndIsr(
        leader=_field(obj, "leader", int, what),
        leader_epoch=_field(obj, "leader_epoch", int, what),
        isr=_int_list(obj.get("isr"), f"{what} isr"),
        controller_epoch=_field(obj, "controller_epoch", int, what),
        zk_version=zk_version,
        leader_recovery_state=recovery,
    )


# -- /config -------------------------------------------------------------------------------


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    return _encode({"version": 1, "config": dict(config)})


def decode_entity_config(path: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    obj = _decode(data, path)
    config = obj.get("config") or {}
    if not isinstance(config, dict):
        raise ZNodeDataError(f"{path}: config is not an object")
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def encode_config_change(entity_path: str) -> bytes:
    """A notification that /config/<entity_path> changed ("topics/T", "brokers/<default>")."""
    return _encode({"version": 2, "entity_path": entity_path})


def decode_config_change(path: str, data: bytes | None) -> tuple[str, str]:
    """(entity type, entity name) of a change notification, from its version 1 or 2 form."""
    obj = _decode(data, path)
    version = obj.get("version")
    if version == 1:
        return _field(obj, "entity_type", str, path), _field(obj, "entity_name", str, path)
    entity_type, slash, name = str(_field(obj, "entity_path", str, path)).partition("/")
    if not slash or not name:
        raise ZNodeDataError(f"{path}: entity_path {obj['entity_path']!r} is not <type>/<name>")
    return entity_type, name


# -- partition lists: ISR changes, preferred elections, reassignments -------------------------


def _encode_partitions(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(set(partitions))]


def _decode_partitions(path: str, data: bytes | None) -> list[dict[str, Any]]:
    obj = _decode(data, path)
    entries = obj.get("partitions")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ZNodeDataError(f"{path}: partitions is not a list of objects")
    return entries


def _entry_partition(entry: Mapping[str, Any], path: str) -> TopicPartition:
    return TopicPartition(_field(entry, "topic", str, path), _field(entry, "partition", int, path))


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode({"version": 1, "partitions": _encode_partitions(partitions)})


def decode_isr_change(path: str, data: bytes | None) -> set[TopicPartition]:
    return {_entry_partition(e, path) for e in _decode_partitions(path, data)}


def encode_preferred_election(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode({"version": 1, "partitions": _encode_partitions(partitions)})


def decode_preferred_election(data: bytes | None) -> set[TopicPartition]:
    path = PREFERRED_REPLICA_ELECTION
    return {_entry_partition(e, path) for e in _decode_partitions(path, data)}


def encode_reassignment(reassignment: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    entries = [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
        for tp, replicas in sorted(reassignment.items())
    ]
    return _encode({"version": 1, "partitions": entries})


def decode_reassignment(data: bytes | None) -> dict[TopicPartition, tuple[int, ...]]:
    path = REASSIGN_PARTITIONS
    return {
        _entry_partition(e, path): _int_list(e.get("replicas"), f"{path} replicas")
        for e in _decode_partitions(path, data)
    }


# -- /cluster/id and /latest_producer_id_block ---------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _encode({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    return str(_field(_decode(data, CLUSTER_ID), "id", str, CLUSTER_ID))


def new_cluster_id() -> str:
    """22 characters of URL-safe base64, as Kafka generates them."""
    return topic_id_to_text(uuid.uuid4())


@attrs.frozen
class ProducerIdBlock:
    broker_id: int
    first_producer_id: int
    size: int = PRODUCER_ID_BLOCK_SIZE

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _encode(
        {
            "version": 1,
            "broker": block.broker_id,
            "block_start": str(block.first_producer_id),
            "block_end": str(block.last_producer_id),
        }
    )


def decode_producer_id_block(data: bytes | None) -> ProducerIdBlock:
    what = PRODUCER_ID_BLOCK
    obj = _decode(data, what)
    start = _int_text(obj, "block_start", what)
    end = _int_text(obj, "block_end", what)
    if end < start:
        raise ZNodeDataError(f"{what}: block_end {end} is before block_start {start}")
    return ProducerIdBlock(_field(obj, "broker", int, what), start, end - start + 1)
