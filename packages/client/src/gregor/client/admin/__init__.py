"""The admin client: AdminClient (blocking) and AsyncAdminClient (trio and asyncio)."""

from gregor.client.admin.sync import AdminClient
from gregor.client.admin.types import (
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ElectionType,
    GroupDescription,
    GroupListing,
    GroupOffset,
    NewTopic,
    ResourceType,
)

__all__ = [
    "AdminClient",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ElectionType",
    "GroupDescription",
    "GroupListing",
    "GroupOffset",
    "NewTopic",
    "ResourceType",
]
