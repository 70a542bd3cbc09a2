"""KafkaZkClient: the typed operations a broker and its controller perform on ZooKeeper.

Each method is one of Kafka's `KafkaZkClient` operations, with Kafka's paths and JSON (see
`znodes`). Methods taking `epoch_zk_version` are the controller's writes: each is sent as a
ZooKeeper transaction together with a version check of `/controller_epoch`, so a controller
that has been replaced can no longer write anything (`ControllerMovedError`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import attrs
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.protocol.states import ZnodeStat

from gregor.broker.zk import znodes
from gregor.broker.zk.session import Handler, SessionListener, ZkSession, ZooKeeperError
from gregor.broker.zk.znodes import (
    BrokerRegistration,
    LeaderAndIsr,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartition,
)

log = logging.getLogger(__name__)

MATCH_ANY_VERSION = -1


class ControllerMovedError(ZooKeeperError):
    """Another broker became controller: this one's writes are fenced off."""


class BrokerIdInUseError(ZooKeeperError):
    """Another live broker is registered with this broker id."""


class TopicExistsError(ZooKeeperError):
    """The topic znode (or its deletion marker) already exists."""


@attrs.frozen
class Op:
    """One write of a (fenced) batch."""

    kind: str  # "create", "set" or "delete"
    path: str
    data: bytes = b""
    version: int = MATCH_ANY_VERSION

    @classmethod
    def create(cls, path: str, data: bytes = b"") -> Op:
        return cls("create", path, data)

    @classmethod
    def set(cls, path: str, data: bytes, version: int = MATCH_ANY_VERSION) -> Op:
        return cls("set", path, data, version)

    @classmethod
    def delete(cls, path: str) -> Op:
        return cls("delete", path)

    def add_to(self, txn: Any) -> None:
        if self.kind == "create":
            txn.create(self.path, self.data)
        elif self.kind == "set":
            txn.set_data(self.path, self.data, self.version)
        else:
            txn.delete(self.path)


@attrs.frozen
class UpdateLeaderAndIsrResult:
    """Per partition: the state as written (with its new zk version) or why it failed; and the
    partitions whose compare-and-set lost to a concurrent writer, to be re-read and retried."""

    finished: dict[TopicPartition, LeaderAndIsr | Exception]
    retry: list[TopicPartition]


class KafkaZkClient:
    """Kafka's ZooKeeper operations over one session (see the module docstring)."""

    def __init__(
        self, connect: str, session_timeout_ms: int = 18000, connection_timeout_ms: int = 18000
    ) -> None:
        self.session = ZkSession(connect, session_timeout_ms / 1000, connection_timeout_ms / 1000)
        # The session that created our broker znode (see `register_broker`).
        self._registration_session = -1

    def __repr__(self) -> str:
        return f"<KafkaZkClient {self.session.connect}>"

    async def start(self) -> None:
        """Connect, create the chroot if needed, and the persistent top-level paths."""
        await self.session.start()
        await self.session.run(self._create_top_level_paths)

    def _create_top_level_paths(self) -> None:
        zk = self.session.kazoo
        for path in znodes.PERSISTENT_PATHS:
            zk.ensure_path(path)

    async def close(self) -> None:
        await self.session.close()

    @property
    def session_id(self) -> int:
        return self.session.session_id

    def add_session_listener(self, listener: SessionListener) -> None:
        self.session.add_session_listener(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        self.session.remove_session_listener(listener)

    def set_node_handler(self, path: str, handler: Handler | None) -> None:
        self.session.set_node_handler(path, handler)

    def set_child_handler(self, path: str, handler: Handler | None) -> None:
        self.session.set_child_handler(path, handler)

    # -- generic reads -----------------------------------------------------------------

    async def get_data(self, path: str, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        watcher = self.session.watcher if watch else None

        def get() -> tuple[bytes, ZnodeStat] | None:
            try:
                data, stat = self.session.kazoo.get(path, watch=watcher)
            except NoNodeError:
                if watcher is not None:  # arm an existence watch instead
                    self.session.kazoo.exists(path, watch=watcher)
                return None
            return data, stat

        return await self.session.run(get)

    async def get_children(self, path: str, watch: bool = False) -> list[str]:
        watcher = self.session.watcher if watch else None

        def children() -> list[str]:
            try:
                return list(self.session.kazoo.get_children(path, watch=watcher))
            except NoNodeError:
                return []

        return await self.session.run(children)

    async def exists(self, path: str, watch: bool = False) -> bool:
        """Whether `path` exists; with `watch`, its node handler hears of any change."""
        watcher = self.session.watcher if watch else None
        stat = await self.session.run(lambda: self.session.kazoo.exists(path, watch=watcher))
        return stat is not None

    async def _get_many(self, paths: Sequence[str], watch: bool = False) -> list[Any]:
        """(data, stat) for each path, None where it does not exist, in one thread hop."""
        zk = self.session.kazoo
        watcher = self.session.watcher if watch else None

        def run() -> list[Any]:
            results = self.session.batch([partial(zk.get_async, p, watch=watcher) for p in paths])
            return [None if isinstance(r, NoNodeError) else _raise_or(r) for r in results]

        return await self.session.run(run)

    # -- fenced (controller) writes ----------------------------------------------------

    def _fenced_batch(self, ops: Sequence[Op], epoch_zk_version: int) -> list[Any]:
        """In a thread: each op in a transaction with the controller epoch check (or alone,
        for MATCH_ANY_VERSION). Returns each op's result or exception; a failed epoch check
        raises ControllerMovedError."""
        zk = self.session.kazoo

        def submit(op: Op) -> Any:
            txn = zk.transaction()
            if epoch_zk_version >= 0:
                txn.check(znodes.CONTROLLER_EPOCH, epoch_zk_version)
            op.add_to(txn)
            return txn.commit_async()

        outcomes = self.session.batch([partial(submit, op) for op in ops])
        results: list[Any] = []
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                results.append(outcome)
                continue
            if epoch_zk_version >= 0:
                check, outcome = outcome[0], outcome[1]
                if isinstance(check, (BadVersionError, NoNodeError)):
                    raise ControllerMovedError(
                        "the controller epoch changed: another broker is controller now"
                    )
            else:
                outcome = outcome[0]
            results.append(outcome)
        return results

    async def _fenced(self, ops: Sequence[Op], epoch_zk_version: int) -> list[Any]:
        if not ops:
            return []
        return await self.session.run(lambda: self._fenced_batch(ops, epoch_zk_version))

    async def delete_paths(self, paths: Iterable[str], epoch_zk_version: int) -> None:
        """Delete znodes (absent ones are fine), fenced by the controller epoch."""
        ops = [Op.delete(p) for p in paths]
        for result in await self._fenced(ops, epoch_zk_version):
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise result

    async def delete_recursive(self, path: str, epoch_zk_version: int = MATCH_ANY_VERSION) -> None:
        """Delete `path` and everything under it (nothing if it does not exist)."""
        for child in await self.get_children(path):
            await self.delete_recursive(f"{path}/{child}", epoch_zk_version)
        result = (await self._fenced([Op.delete(path)], epoch_zk_version))[0]
        if isinstance(result, NotEmptyError):  # a child was created meanwhile
            await self.delete_recursive(path, epoch_zk_version)
        elif isinstance(result, Exception) and not isinstance(result, NoNodeError):
            raise result

    async def create_recursive(self, path: str, data: bytes = b"") -> None:
        """Create `path` with its missing parents; NodeExistsError if it exists."""
        await self.session.run(lambda: self.session.kazoo.create(path, data, makepath=True))

    async def set_or_create(self, path: str, data: bytes) -> None:
        """Write `data` to `path` (unfenced, any version), creating it and its parents if
        missing; a concurrent writer's create is overwritten."""

        def write() -> None:
            zk = self.session.kazoo
            try:
                zk.set(path, data)
            except NoNodeError:
                try:
                    zk.create(path, data, makepath=True)
                except NodeExistsError:
                    zk.set(path, data)

        await self.session.run(write)

    # -- cluster id --------------------------------------------------------------------

    async def get_cluster_id(self) -> str | None:
        found = await self.get_data(znodes.CLUSTER_ID)
        return None if found is None else znodes.decode_cluster_id(found[0])

    async def create_or_get_cluster_id(self, proposed: str) -> str:
        try:
            await self.create_recursive(znodes.CLUSTER_ID, znodes.encode_cluster_id(proposed))
            return proposed
        except NodeExistsError:
            found = await self.get_cluster_id()
            if found is None:
                raise ZooKeeperError(f"{znodes.CLUSTER_ID} vanished while reading it") from None
            return found

    # -- brokers -----------------------------------------------------------------------

    async def register_broker(self, broker: BrokerRegistration) -> int:
        """Create our ephemeral /brokers/ids/N; return the broker epoch (its czxid).

        A znode left by this broker's previous, expired session is replaced (ZooKeeper may
        not have deleted it yet); one owned by any other live session means the id is taken.
        """
        path = znodes.broker_path(broker.id)
        data = znodes.encode_broker(broker)
        stat: ZnodeStat = await self.session.run(lambda: self._checked_ephemeral(path, data))
        log.info(
            "registered broker %d at %s with endpoints %s (broker epoch %d)",
            broker.id,
            path,
            ",".join(e.connection_string for e in broker.endpoints),
            stat.czxid,
        )
        return int(stat.czxid)

    def _checked_ephemeral(self, path: str, data: bytes) -> ZnodeStat:
        zk = self.session.kazoo
        while True:
            session = self.session.session_id
            try:
                zk.create(path, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                try:
                    _, stat = zk.get(path)
                except NoNodeError:
                    continue  # it went away meanwhile: create again
                owner = stat.ephemeralOwner
                if owner == session:
                    self._registration_session = session
                    return stat
                if owner == self._registration_session and owner != session:
                    log.info("replacing %s left by our expired session %#x", path, owner)
                    try:
                        zk.delete(path)
                    except NoNodeError:
                        pass
                    continue
                raise BrokerIdInUseError(
                    f"{path} is already registered by another live session ({owner:#x}): "
                    "is another broker running with the same broker.id?"
                ) from None
            _, stat = zk.get(path)
            self._registration_session = session
            return stat

    async def update_broker_info(self, broker: BrokerRegistration) -> None:
        data = znodes.encode_broker(broker)
        path = znodes.broker_path(broker.id)
        await self.session.run(lambda: self.session.kazoo.set(path, data))

    async def get_broker_ids(self, watch: bool = False) -> list[int]:
        return sorted(
            int(c) for c in await self.get_children(znodes.BROKER_IDS, watch) if c.isdigit()
        )

    async def get_all_brokers(
        self, watch: bool = False
    ) -> dict[int, tuple[BrokerRegistration, int]]:
        """Every registered broker with its broker epoch; `watch` arms /brokers/ids."""
        ids = await self.get_broker_ids(watch)
        found = await self._get_many([znodes.broker_path(i) for i in ids])
        brokers: dict[int, tuple[BrokerRegistration, int]] = {}
        for broker_id, entry in zip(ids, found, strict=True):
            if entry is not None:
                data, stat = entry
                brokers[broker_id] = (znodes.decode_broker(broker_id, data), int(stat.czxid))
        return brokers

    async def get_broker(self, broker_id: int, watch: bool = False) -> BrokerRegistration | None:
        found = await self.get_data(znodes.broker_path(broker_id), watch)
        return None if found is None else znodes.decode_broker(broker_id, found[0])

    # -- controller election -----------------------------------------------------------

    async def get_controller_id(self, watch: bool = False) -> int | None:
        found = await self.get_data(znodes.CONTROLLER, watch)
        return None if found is None else znodes.decode_controller(found[0])

    async def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, znode version) of /controller_epoch, or None if it does not exist yet."""
        found = await self.get_data(znodes.CONTROLLER_EPOCH)
        if found is None:
            return None
        return znodes.decode_controller_epoch(found[0]), int(found[1].version)

    async def register_controller_and_increment_epoch(self, broker_id: int) -> tuple[int, int]:
        """Become controller: create /controller and bump /controller_epoch atomically.

        Returns (new epoch, its znode version); raises ControllerMovedError when another
        broker won.
        """
        current = await self.get_controller_epoch()
        if current is None:
            current = await self._create_controller_epoch()
        epoch, version = current
        new_epoch = epoch + 1

        def elect() -> Any:
            txn = self.session.kazoo.transaction()
            txn.create(znodes.CONTROLLER, znodes.encode_controller(broker_id), ephemeral=True)
            txn.set_data(
                znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(new_epoch), version
            )
            return txn.commit_async()

        def run() -> list[Any]:
            return list(_raise_or(self.session.batch([elect])[0]))

        results = await self.session.run(run)
        if not any(isinstance(r, Exception) for r in results):
            return new_epoch, int(results[1].version)
        # Lost the race, or a retried transaction of ours had already won: check which.
        controller = await self.get_controller_id()
        now = await self.get_controller_epoch()
        if controller == broker_id and now is not None and now[0] == new_epoch:
            return new_epoch, now[1]
        raise ControllerMovedError(f"broker {controller} was elected controller instead")

    async def _create_controller_epoch(self) -> tuple[int, int]:
        data = znodes.encode_controller_epoch(0)
        try:
            await self.session.run(lambda: self.session.kazoo.create(znodes.CONTROLLER_EPOCH, data))
            return 0, 0
        except NodeExistsError:
            found = await self.get_controller_epoch()
            if found is None:
                raise ZooKeeperError(f"{znodes.CONTROLLER_EPOCH} vanished") from None
            return found

    async def delete_controller(self, epoch_zk_version: int) -> None:
        await self.delete_paths([znodes.CONTROLLER], epoch_zk_version)

    # -- topics and assignments --------------------------------------------------------

    async def get_all_topics(self, watch: bool = False) -> set[str]:
        return set(await self.get_children(znodes.TOPICS, watch))

    async def topic_exists(self, topic: str) -> bool:
        return await self.exists(znodes.topic_path(topic))

    async def get_topic_assignments(
        self, topics: Iterable[str], watch: bool = False
    ) -> dict[str, TopicAssignment]:
        """The assignment (and topic id) of each existing topic; `watch` arms each topic node."""
        names = sorted(set(topics))
        found = await self._get_many([znodes.topic_path(t) for t in names], watch)
        return {
            t: znodes.decode_topic(t, entry[0])
            for t, entry in zip(names, found, strict=True)
            if entry is not None
        }

    async def get_partitions_for_topic(self, topic: str) -> dict[int, ReplicaAssignment]:
        found = await self.get_topic_assignments([topic])
        return dict(found[topic].partitions) if topic in found else {}

    async def create_topic_assignment(
        self, topic: str, topic_id: uuid.UUID | None, assignment: Mapping[int, Sequence[int]]
    ) -> None:
        """Create /brokers/topics/T: the controller notices and creates the partitions."""
        partitions = {p: ReplicaAssignment(tuple(r)) for p, r in assignment.items()}
        try:
            await self.create_recursive(
                znodes.topic_path(topic), znodes.encode_topic(topic_id, partitions)
            )
        except NodeExistsError:
            raise TopicExistsError(f"Topic '{topic}' already exists.") from None

    async def set_topic_assignment(
        self,
        topic: str,
        topic_id: uuid.UUID | None,
        partitions: Mapping[int, ReplicaAssignment],
        epoch_zk_version: int = MATCH_ANY_VERSION,
    ) -> None:
        data = znodes.encode_topic(topic_id, partitions)
        path = znodes.topic_path(topic)
        results = await self._fenced([Op.set(path, data)], epoch_zk_version)
        _raise_or(results[0])

    # -- partition state ---------------------------------------------------------------

    async def get_partition_states(
        self, partitions: Iterable[TopicPartition], watch: bool = False
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """The state znode of each partition that has one."""
        tps = list(partitions)
        found = await self._get_many([znodes.partition_state_path(tp) for tp in tps], watch)
        return {
            tp: znodes.decode_partition_state(tp, entry[0], int(entry[1].version))
            for tp, entry in zip(tps, found, strict=True)
            if entry is not None
        }

    async def get_partition_state(
        self, tp: TopicPartition, watch: bool = False
    ) -> LeaderAndIsr | None:
        return (await self.get_partition_states([tp], watch)).get(tp)

    async def create_partition_states(
        self, states: Mapping[TopicPartition, LeaderAndIsr], epoch_zk_version: int
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Create the state znodes of new partitions (and their parents), fenced."""
        tps = list(states)
        parents = [znodes.topic_partitions_path(t) for t in sorted({tp.topic for tp in tps})]
        parents += [znodes.partition_path(tp) for tp in tps]
        for result in await self._fenced([Op.create(p) for p in parents], epoch_zk_version):
            if isinstance(result, Exception) and not isinstance(result, NodeExistsError):
                raise result
        ops = [
            Op.create(znodes.partition_state_path(tp), znodes.encode_partition_state(states[tp]))
            for tp in tps
        ]
        results = await self._fenced(ops, epoch_zk_version)
        return {
            tp: r if isinstance(r, Exception) else attrs.evolve(states[tp], zk_version=0)
            for tp, r in zip(tps, results, strict=True)
        }

    async def update_partition_states(
        self, states: Mapping[TopicPartition, LeaderAndIsr], epoch_zk_version: int
    ) -> UpdateLeaderAndIsrResult:
        """The controller's compare-and-set of partition states, each against its
        `zk_version`, all fenced by the controller epoch."""
        tps = list(states)
        ops = [
            Op.set(
                znodes.partition_state_path(tp),
                znodes.encode_partition_state(states[tp]),
                states[tp].zk_version,
            )
            for tp in tps
        ]
        results = await self._fenced(ops, epoch_zk_version)
        finished: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        retry: list[TopicPartition] = []
        for tp, result in zip(tps, results, strict=True):
            if isinstance(result, BadVersionError):
                retry.append(tp)
            elif isinstance(result, Exception):
                finished[tp] = result
            else:
                finished[tp] = attrs.evolve(states[tp], zk_version=int(result.version))
        return UpdateLeaderAndIsrResult(finished, retry)

    async def update_leader_and_isr(
        self, tp: TopicPartition, state: LeaderAndIsr, expected_zk_version: int
    ) -> int | None:
        """A partition leader's ISR change: compare-and-set the state znode.

        Returns the new zk version, or None when the znode changed since `expected_zk_version`
        (the controller moved leadership, or another write won): re-read it and decide again.
        A retry after a lost connection whose first attempt had in fact succeeded is detected
        by reading the znode back, as Kafka does.
        """
        path = znodes.partition_state_path(tp)
        data = znodes.encode_partition_state(state)

        def write() -> int | None:
            zk = self.session.kazoo
            try:
                return int(zk.set(path, data, version=expected_zk_version).version)
            except NoNodeError:
                return None
            except BadVersionError:
                try:
                    current, stat = zk.get(path)
                except NoNodeError:
                    return None
                written = znodes.decode_partition_state(tp, current, int(stat.version))
                return int(stat.version) if written.same_as(state) else None

        return await self.session.run(write)

    async def propagate_isr_changes(self, partitions: Iterable[TopicPartition]) -> None:
        """Tell the controller these partitions' ISRs changed (a sequential notification)."""
        data = znodes.encode_isr_change(partitions)
        path = znodes.isr_change_path()
        await self.session.run(lambda: self.session.kazoo.create(path, data, sequence=True))

    async def get_isr_change_notifications(self, watch: bool = False) -> list[str]:
        """The sequence numbers of pending ISR change notifications."""
        children = await self.get_children(znodes.ISR_CHANGE_NOTIFICATION, watch)
        return sorted(znodes.sequence_number(c, znodes.ISR_CHANGE_PREFIX) for c in children)

    async def get_partitions_from_isr_changes(self, numbers: Sequence[str]) -> set[TopicPartition]:
        paths = [znodes.isr_change_path(n) for n in numbers]
        partitions: set[TopicPartition] = set()
        for path, entry in zip(paths, await self._get_many(paths), strict=True):
            if entry is not None:
                try:
                    partitions |= znodes.decode_isr_change(path, entry[0])
                except znodes.ZNodeDataError as exc:
                    log.warning("ignoring ISR change notification: %s", exc)
        return partitions

    async def delete_isr_change_notifications(
        self, numbers: Sequence[str], epoch_zk_version: int
    ) -> None:
        await self.delete_paths([znodes.isr_change_path(n) for n in numbers], epoch_zk_version)

    # -- topic deletion ----------------------------------------------------------------

    async def create_delete_topic_path(self, topic: str) -> None:
        """Mark a topic for deletion; TopicExistsError if it is marked already."""
        try:
            await self.create_recursive(znodes.delete_topic_path(topic))
        except NodeExistsError:
            raise TopicExistsError(f"topic {topic} is already marked for deletion") from None

    async def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return await self.exists(znodes.delete_topic_path(topic))

    async def get_topic_deletions(self, watch: bool = False) -> set[str]:
        return set(await self.get_children(znodes.DELETE_TOPICS, watch))

    async def delete_topic_deletions(self, topics: Iterable[str], epoch_zk_version: int) -> None:
        await self.delete_paths([znodes.delete_topic_path(t) for t in topics], epoch_zk_version)

    async def delete_topic_znode(self, topic: str, epoch_zk_version: int) -> None:
        await self.delete_recursive(znodes.topic_path(topic), epoch_zk_version)

    async def delete_topic_configs(self, topics: Iterable[str], epoch_zk_version: int) -> None:
        paths = [znodes.config_entity_path(znodes.CONFIG_TOPICS, t) for t in topics]
        await self.delete_paths(paths, epoch_zk_version)

    # -- reassignments and preferred elections through znodes ----------------------------

    async def get_partition_reassignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        found = await self.get_data(znodes.REASSIGN_PARTITIONS)
        if found is None:
            return {}
        try:
            return znodes.decode_reassignment(found[0])
        except znodes.ZNodeDataError as exc:
            log.warning("ignoring partition reassignment: %s", exc)
            return {}

    async def create_partition_reassignment(
        self, reassignment: Mapping[TopicPartition, Sequence[int]]
    ) -> None:
        await self.create_recursive(
            znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(reassignment)
        )

    async def set_or_create_partition_reassignment(
        self, reassignment: Mapping[TopicPartition, Sequence[int]], epoch_zk_version: int
    ) -> None:
        data = znodes.encode_reassignment(reassignment)
        path = znodes.REASSIGN_PARTITIONS
        result = (await self._fenced([Op.set(path, data)], epoch_zk_version))[0]
        if isinstance(result, NoNodeError):
            result = (await self._fenced([Op.create(path, data)], epoch_zk_version))[0]
        _raise_or(result)

    async def delete_partition_reassignment(self, epoch_zk_version: int) -> None:
        await self.delete_paths([znodes.REASSIGN_PARTITIONS], epoch_zk_version)

    async def create_preferred_replica_election(self, partitions: Iterable[TopicPartition]) -> None:
        await self.create_recursive(
            znodes.PREFERRED_REPLICA_ELECTION, znodes.encode_preferred_election(partitions)
        )

    async def get_preferred_replica_election(self) -> set[TopicPartition]:
        found = await self.get_data(znodes.PREFERRED_REPLICA_ELECTION)
        if found is None:
            return set()
        try:
            return znodes.decode_preferred_election(found[0])
        except znodes.ZNodeDataError as exc:
            log.warning("ignoring preferred replica election: %s", exc)
            return set()

    async def delete_preferred_replica_election(self, epoch_zk_version: int) -> None:
        await self.delete_paths([znodes.PREFERRED_REPLICA_ELECTION], epoch_zk_version)

    # -- dynamic configs ---------------------------------------------------------------

    async def get_entity_configs(self, entity_type: str, name: str) -> dict[str, str]:
        path = znodes.config_entity_path(entity_type, name)
        found = await self.get_data(path)
        return {} if found is None else znodes.decode_entity_config(path, found[0])

    async def get_entities_configs(
        self, entity_type: str, names: Iterable[str]
    ) -> dict[str, dict[str, str]]:
        ordered = sorted(set(names))
        paths = [znodes.config_entity_path(entity_type, n) for n in ordered]
        found = await self._get_many(paths)
        return {
            name: {} if entry is None else znodes.decode_entity_config(path, entry[0])
            for name, path, entry in zip(ordered, paths, found, strict=True)
        }

    async def set_or_create_entity_configs(
        self, entity_type: str, name: str, config: Mapping[str, str]
    ) -> None:
        path = znodes.config_entity_path(entity_type, name)
        await self.set_or_create(path, znodes.encode_entity_config(config))

    async def get_all_entities_with_config(self, entity_type: str) -> list[str]:
        """Every entity of the type with a config znode; for users, each user's client ids
        too, as "<user>/clients/<client-id>" (Kafka's nested quota entities)."""
        names = await self.get_children(f"{znodes.CONFIG}/{entity_type}")
        if entity_type != znodes.CONFIG_USERS:
            return names
        nested = []
        for user in names:
            path = f"{znodes.config_entity_path(entity_type, user)}/{znodes.CONFIG_CLIENTS}"
            nested += [f"{user}/{znodes.CONFIG_CLIENTS}/{c}" for c in await self.get_children(path)]
        return names + nested

    async def create_config_change_notification(self, entity_path: str) -> None:
        """Announce that /config/<entity_path> changed, so every broker re-reads it."""
        data = znodes.encode_config_change(entity_path)
        prefix = f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}"
        await self.session.run(
            lambda: self.session.kazoo.create(prefix, data, sequence=True, makepath=True)
        )

    async def change_entity_config(
        self, entity_type: str, name: str, config: Mapping[str, str]
    ) -> None:
        """Replace an entity's dynamic config and notify every broker."""
        await self.set_or_create_entity_configs(entity_type, name, config)
        await self.create_config_change_notification(f"{entity_type}/{name}")

    # -- producer ids ------------------------------------------------------------------

    async def allocate_producer_id_block(
        self, broker_id: int, size: int = znodes.PRODUCER_ID_BLOCK_SIZE
    ) -> ProducerIdBlock:
        """Claim the next block of producer ids by compare-and-set on /latest_producer_id_block."""
        path = znodes.PRODUCER_ID_BLOCK
        while True:
            found = await self.get_data(path)
            if found is None:
                await self.session.run(lambda: self.session.kazoo.ensure_path(path))
                continue
            data, stat = found
            start = znodes.decode_producer_id_block(data).next_block_first_id if data else 0
            if start > 2**63 - 1 - size:
                raise ZooKeeperError("producer ids are exhausted")
            block = ProducerIdBlock(broker_id, start, size)
            encoded = znodes.encode_producer_id_block(block)

            def claim(encoded: bytes = encoded, version: int = int(stat.version)) -> bool:
                try:
                    self.session.kazoo.set(path, encoded, version=version)
                    return True
                except BadVersionError:
                    return False

            if await self.session.run(claim):
                log.info("acquired producer id block %d-%d", start, block.last_producer_id)
                return block


def _raise_or(result: Any) -> Any:
    if isinstance(result, (KazooException, ZooKeeperError)):
        raise result
    return result
