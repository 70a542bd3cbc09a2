"""AclAuthorizer: Kafka's ZooKeeper-mode authorizer (`kafka.security.authorizer.AclAuthorizer`).

Every broker keeps all ACLs in memory, loaded from ZooKeeper at start (`gregor.broker.zk.acls`)
and kept current by the change notifications any broker (or Kafka's tools) writes: a watch on
/kafka-acl-changes and /kafka-acl-extended-changes wakes the listener, which re-reads each
resource named by a new notification. A change made through this broker is in its own cache at
once; on the others, as soon as the watch fires.

A decision, as Kafka makes it:
- a principal in `super.users` may do everything;
- the ACLs that apply to a resource are those on its literal name, on the literal wildcard
  `*`, and on every prefix pattern its name starts with;
- none apply: `allow.everyone.if.no.acl.found` decides;
- a DENY for the principal (or `User:*`), the host (or `*`) and the operation (or ALL) refuses;
- else an ALLOW of the operation, ALL, or an operation implying it (READ, WRITE, DELETE and
  ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows; nothing else does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Final

import trio

from gregor.broker.authorization import (
    IMPLIED_BY,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)
from gregor.broker.zk.acls import CHANGE_PATHS, CHANGE_PREFIX, Acls, ZkAclStore, decode_change
from gregor.broker.zk.client import KafkaZkClient
from gregor.broker.zk.session import ZooKeeperClosedError, ZooKeeperError
from gregor.broker.zk.znodes import ZNodeDataError, sequence_number

log = logging.getLogger(__name__)

NOTIFICATION_EXPIRATION_S: Final = 15 * 60  # Kafka purges older change notifications
PURGE_INTERVAL_S: Final = 60.0


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons, e.g. "User:admin;User:broker"."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class AclAuthorizer:
    def __init__(
        self, zk: KafkaZkClient, super_users: frozenset[str], allow_if_no_acl: bool
    ) -> None:
        self.zk = zk
        self.store = ZkAclStore(zk)
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: dict[ResourcePattern, Acls] = {}
        # Prefixed patterns by type, for the lookup of every prefix of a name.
        self._prefixed: dict[ResourceType, dict[str, Acls]] = {}
        self._last_applied = dict.fromkeys(CHANGE_PATHS, -1)
        self._wakeup = trio.Event()
        self._purged_at = dict.fromkeys(CHANGE_PATHS, 0.0)
        self._lock = trio.Lock()  # one writer of the znodes at a time from this broker

    # -- decisions -------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        acls = self._applying(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        matching = [e for e in acls if e.applies(principal, host)]
        if any(
            e.permission == PermissionType.DENY and e.operation in (operation, AclOperation.ALL)
            for e in matching
        ):
            return False
        allowing = (*IMPLIED_BY.get(operation, (operation,)), AclOperation.ALL)
        return any(
            e.permission == PermissionType.ALLOW and e.operation in allowing for e in matching
        )

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        if principal in self.super_users:
            return True
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        allowed: list[ResourcePattern] = []
        any_acl = False
        for pattern, acls in self._acls.items():
            if pattern.resource_type != resource_type:
                continue
            any_acl = True
            for e in acls:
                if not e.applies(principal, host) or e.operation not in (
                    operation,
                    AclOperation.ALL,
                ):
                    continue
                if e.permission == PermissionType.ALLOW:
                    allowed.append(pattern)
                elif pattern.pattern_type == PatternType.PREFIXED:
                    denied_prefixes.add(pattern.name)
                else:
                    denied_literal.add(pattern.name)
        if WILDCARD in denied_literal:
            return False
        for pattern in allowed:
            if any(pattern.name.startswith(prefix) for prefix in denied_prefixes):
                continue
            literal = pattern.pattern_type == PatternType.LITERAL
            if not literal or pattern.name == WILDCARD or pattern.name not in denied_literal:
                return True
        return self.allow_if_no_acl and not any_acl

    def _applying(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        found: list[AccessControlEntry] = []
        for literal in (name, WILDCARD):
            found.extend(self._acls.get(ResourcePattern(resource_type, literal), ()))
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for end in range(1, len(name) + 1):
                found.extend(prefixed.get(name[:end], ()))
        return found

    # -- the ACLs --------------------------------------------------------------------------

    def bindings(self, selected: AclBindingFilter) -> list[AclBinding]:
        """Every ACL the filter selects (DescribeAcls)."""
        return [
            AclBinding(pattern, entry)
            for pattern, acls in self._acls.items()
            if selected.matches_pattern(pattern)
            for entry in acls
            if selected.matches_entry(entry)
        ]

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add the ACLs (present ones are kept once) and notify every broker."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        async with self._lock:
            for pattern, entries in by_pattern.items():
                await self._update(pattern, lambda acls, new=entries: acls | new)

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter selects; for each filter, the ACLs it removed."""
        removed: list[list[AclBinding]] = [[] for _ in filters]
        async with self._lock:
            patterns = [p for p in self._acls if any(f.matches_pattern(p) for f in filters)]
            for pattern in patterns:
                applying = [(i, f) for i, f in enumerate(filters) if f.matches_pattern(pattern)]

                def keep(
                    acls: Acls, applying: list[tuple[int, AclBindingFilter]] = applying
                ) -> Acls:
                    return frozenset(
                        e for e in acls if not any(f.matches_entry(e) for _, f in applying)
                    )

                before = await self._update(pattern, keep)
                for entry in before:
                    for i, f in applying:
                        if f.matches_entry(entry):
                            removed[i].append(AclBinding(pattern, entry))
        return removed

    async def _update(self, pattern: ResourcePattern, change: Any) -> Acls:
        """Compare-and-set the pattern's znode until it holds change(current ACLs); returns
        the ACLs before the change."""
        while True:
            current, version = await self.store.read(pattern)
            wanted = change(current)
            if wanted == current:
                self._set(pattern, current)
                return current
            if await self.store.write(pattern, wanted, version):
                break
        self._set(pattern, wanted)
        await self.store.notify(pattern)
        return current

    def _set(self, pattern: ResourcePattern, acls: Acls) -> None:
        if acls:
            self._acls[pattern] = acls
        else:
            self._acls.pop(pattern, None)
        if pattern.pattern_type == PatternType.PREFIXED:
            prefixed = self._prefixed.setdefault(pattern.resource_type, {})
            if acls:
                prefixed[pattern.name] = acls
            else:
                prefixed.pop(pattern.name, None)

    # -- following the changes -------------------------------------------------------------

    def session_expired(self) -> None:
        pass

    def session_established(self) -> None:
        self._wakeup.set()

    def _wake(self) -> None:
        self._wakeup.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Load every ACL, then follow the change notifications until cancelled."""
        for path in CHANGE_PATHS:
            self.zk.set_child_handler(path, self._wake)
        self.zk.add_session_listener(self)
        try:
            await self.store.create_paths()
            # Notifications up to now are covered by the full load that follows.
            for path in CHANGE_PATHS:
                self._last_applied[path] = max(
                    (n for n, _ in await self._pending(path)), default=-1
                )
            for pattern, acls in (await self.store.read_all()).items():
                self._set(pattern, acls)
            log.info("loaded %d ACLs", sum(len(a) for a in self._acls.values()))
            task_status.started()
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                try:
                    for path in CHANGE_PATHS:
                        await self._apply_changes(path)
                except ZooKeeperClosedError:
                    return
                except ZooKeeperError as exc:
                    log.warning("ACL change notifications: %s; retrying", exc)
                    self._wakeup.set()
                    await trio.sleep(1.0)
        finally:
            for path in CHANGE_PATHS:
                self.zk.set_child_handler(path, None)
            self.zk.remove_session_listener(self)

    async def _pending(self, path: str) -> list[tuple[int, str]]:
        """(sequence number, node name) of every notification under `path`; arms the watch."""
        found = []
        for name in await self.zk.get_children(path, watch=True):
            number = sequence_number(name, CHANGE_PREFIX)
            if name.startswith(CHANGE_PREFIX) and number.isdigit():
                found.append((int(number), name))
        return sorted(found)

    async def _apply_changes(self, path: str) -> None:
        notifications = await self._pending(path)
        for number, name in notifications:
            if number <= self._last_applied[path]:
                continue
            found = await self.zk.get_data(f"{path}/{name}")
            if found is not None:
                try:
                    pattern = decode_change(path, found[0])
                    acls, _version = await self.store.read(pattern)
                except ZNodeDataError as exc:
                    log.warning("ignoring an ACL change: %s", exc)
                else:
                    self._set(pattern, acls)
                    log.info("ACLs of %s are now %d entries", pattern, len(acls))
            self._last_applied[path] = number
        if time.monotonic() - self._purged_at[path] > PURGE_INTERVAL_S:
            self._purged_at[path] = time.monotonic()
            await self._purge(path, notifications)

    async def _purge(self, path: str, notifications: list[tuple[int, str]]) -> None:
        now = time.time()
        expired = []
        for _number, name in notifications:
            found = await self.zk.get_data(f"{path}/{name}")
            if found is not None and now - found[1].ctime / 1000 > NOTIFICATION_EXPIRATION_S:
                expired.append(f"{path}/{name}")
        if expired:
            await self.zk.delete_paths(expired, epoch_zk_version=-1)
