"""Topic ACL sync (`sync.topic.acls.enabled`), as MM2's MirrorSourceConnector does it.

Every `sync.topic.acls.interval.seconds` the source's topic ACLs are read, and those of
mirrored topics are created on the target for their remote topics, renamed by the
replication policy. Literal bindings only: a prefixed pattern, or the wildcard `*`, would
name the target's own topics too (MM2 copies `*` as a topic named `A.*`). A remote topic
is the mirror's to write: ALLOW WRITE is not copied, and ALLOW ALL becomes ALLOW READ.
DENY bindings are copied as they are. ACLs are only added, never deleted (as in MM2: the
target may have ACLs of its own).

A source without an authorizer (SECURITY_DISABLED) is reported once, with the advice to
turn the sync off, and skipped after that.
"""

from __future__ import annotations

import logging

import trio

from gregor.client import AsyncAdminClient
from gregor.client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from gregor.mirror.config import FlowConfig
from gregor.mirror.topics import should_replicate
from gregor.protocol.errors import SecurityDisabledError

log = logging.getLogger("gregor.mirror")

ANY_TOPIC_ACL = AclBindingFilter(AclResourceType.TOPIC)
WILDCARD = "*"  # a literal "*" is every topic: on the target it would name B's own too


def should_replicate_acl(flow: FlowConfig, binding: AclBinding) -> bool:
    """A literal topic binding of a mirrored topic, other than ALLOW WRITE."""
    return (
        binding.resource_type is AclResourceType.TOPIC
        and binding.pattern_type is PatternType.LITERAL
        and binding.name != WILDCARD
        and not (
            binding.permission_type is AclPermissionType.ALLOW
            and binding.operation is AclOperation.WRITE
        )
        and should_replicate(flow, binding.name)
    )


def target_acl(flow: FlowConfig, binding: AclBinding) -> AclBinding:
    """The binding for the remote topic: ALLOW ALL is downgraded to ALLOW READ."""
    operation = binding.operation
    if binding.permission_type is AclPermissionType.ALLOW and operation is AclOperation.ALL:
        operation = AclOperation.READ
    return AclBinding(
        AclResourceType.TOPIC,
        flow.policy.format_remote_topic(flow.source.alias, binding.name),
        PatternType.LITERAL,
        binding.principal,
        binding.host,
        operation,
        binding.permission_type,
    )


class AclSync:
    """Copies the flow's topic ACLs to the target, every sync.topic.acls.interval.seconds."""

    def __init__(self, flow: FlowConfig, source: AsyncAdminClient, target: AsyncAdminClient):
        self.flow = flow
        self.source = source
        self.target = target
        self.disabled_reported = False

    async def run(self) -> None:
        while True:
            await self.sync()
            await trio.sleep(self.flow.sync_topic_acls_interval)

    async def sync(self) -> list[AclBinding]:
        """Create the target bindings it lacks; return them."""
        flow = self.flow
        try:
            found = await self.source.describe_acls(ANY_TOPIC_ACL)
        except SecurityDisabledError as exc:
            if not self.disabled_reported:
                self.disabled_reported = True
                log.warning(
                    "%s: %s has no ACL authorizer (%s); consider disabling topic ACL syncing "
                    "(sync.topic.acls.enabled = false)",
                    flow.name,
                    flow.source.alias,
                    exc,
                )
            else:
                log.debug("%s: no authorizer on %s: ACL sync skipped", flow.name, flow.source.alias)
            return []
        wanted = {target_acl(flow, b) for b in found if should_replicate_acl(flow, b)}
        if not wanted:
            return []
        present = set(await self.target.describe_acls(ANY_TOPIC_ACL))
        missing = sorted(wanted - present, key=repr)
        if missing:
            await self.target.create_acls(missing)
            for binding in missing:
                log.info("%s: topic ACL on %s: %s", flow.name, flow.target.alias, binding)
        return missing
