"""The admin client: AdminClient (blocking) and AsyncAdminClient (trio and asyncio)."""

from gregor.client.admin.sync import AdminClient
from gregor.client.admin.types import (
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ElectionType,
    GroupDescription,
    GroupListing,
    GroupOffset,
    NewTopic,
    QuotaMatch,
    ResourceType,
)

__all__ = [
    "AdminClient",
    "ClientQuotaEntity",
    "ClientQuotaFilterComponent",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ElectionType",
    "GroupDescription",
    "GroupListing",
    "GroupOffset",
    "NewTopic",
    "QuotaMatch",
    "ResourceType",
]
