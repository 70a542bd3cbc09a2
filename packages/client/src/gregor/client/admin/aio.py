"""AsyncAdminClient: the admin client for trio and asyncio code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gregor.client.admin.core import AdminCore
from gregor.client.config import AdminConfig
from gregor.client.runtime import AsyncBridge, AsyncClient, awaiting


class AsyncAdminClient(AsyncClient):
    """The operations of AdminClient, awaitable: `async with AsyncAdminClient(config)`."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = AdminConfig.from_dict(config)
        self._core = AdminCore(self.config)
        self._service = self._core.run
        self._bridge = AsyncBridge(f"gregor-admin-{self.config.client_id}")

    create_topics = awaiting(AdminCore.create_topics)
    delete_topics = awaiting(AdminCore.delete_topics)
    create_partitions = awaiting(AdminCore.create_partitions)
    delete_records = awaiting(AdminCore.delete_records)
    describe_topics = awaiting(AdminCore.describe_topics)
    list_topics = awaiting(AdminCore.list_topics)
    describe_configs = awaiting(AdminCore.describe_configs)
    alter_configs = awaiting(AdminCore.alter_configs)
    list_offsets = awaiting(AdminCore.list_offsets)
    list_groups = awaiting(AdminCore.list_groups)
    describe_groups = awaiting(AdminCore.describe_groups)
    delete_groups = awaiting(AdminCore.delete_groups)
    list_group_offsets = awaiting(AdminCore.list_group_offsets)
    alter_group_offsets = awaiting(AdminCore.alter_group_offsets)
    describe_cluster = awaiting(AdminCore.describe_cluster)
    elect_leaders = awaiting(AdminCore.elect_leaders)
    alter_partition_reassignments = awaiting(AdminCore.alter_partition_reassignments)
    list_partition_reassignments = awaiting(AdminCore.list_partition_reassignments)
    describe_client_quotas = awaiting(AdminCore.describe_client_quotas)
    alter_client_quotas = awaiting(AdminCore.alter_client_quotas)
    create_acls = awaiting(AdminCore.create_acls)
    describe_acls = awaiting(AdminCore.describe_acls)
    delete_acls = awaiting(AdminCore.delete_acls)
    describe_user_scram_credentials = awaiting(AdminCore.describe_user_scram_credentials)
    alter_user_scram_credentials = awaiting(AdminCore.alter_user_scram_credentials)
