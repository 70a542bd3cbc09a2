"""AdminClient: the blocking admin client; its I/O runs on a background thread."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gregor.client.admin.core import AdminCore
from gregor.client.config import AdminConfig
from gregor.client.runtime import IOThread, blocking


class AdminClient:
    """Topics, partitions, configs, offsets, groups and leadership, as Kafka's admin API.

    Each method takes an optional `timeout` in seconds (default.api.timeout.ms).
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = AdminConfig.from_dict(config)
        self._core = AdminCore(self.config)
        self._io = IOThread(f"gregor-admin-{self.config.client_id}")
        self._io.start(self._core.run)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._io.stop()

    create_topics = blocking(AdminCore.create_topics)
    delete_topics = blocking(AdminCore.delete_topics)
    create_partitions = blocking(AdminCore.create_partitions)
    delete_records = blocking(AdminCore.delete_records)
    describe_topics = blocking(AdminCore.describe_topics)
    list_topics = blocking(AdminCore.list_topics)
    describe_configs = blocking(AdminCore.describe_configs)
    alter_configs = blocking(AdminCore.alter_configs)
    list_offsets = blocking(AdminCore.list_offsets)
    list_groups = blocking(AdminCore.list_groups)
    describe_groups = blocking(AdminCore.describe_groups)
    delete_groups = blocking(AdminCore.delete_groups)
    list_group_offsets = blocking(AdminCore.list_group_offsets)
    alter_group_offsets = blocking(AdminCore.alter_group_offsets)
    describe_cluster = blocking(AdminCore.describe_cluster)
    elect_leaders = blocking(AdminCore.elect_leaders)
    alter_partition_reassignments = blocking(AdminCore.alter_partition_reassignments)
    list_partition_reassignments = blocking(AdminCore.list_partition_reassignments)
    describe_client_quotas = blocking(AdminCore.describe_client_quotas)
    alter_client_quotas = blocking(AdminCore.alter_client_quotas)
    create_acls = blocking(AdminCore.create_acls)
    describe_acls = blocking(AdminCore.describe_acls)
    delete_acls = blocking(AdminCore.delete_acls)
    describe_user_scram_credentials = blocking(AdminCore.describe_user_scram_credentials)
    alter_user_scram_credentials = blocking(AdminCore.alter_user_scram_credentials)
