"""Topic names: Kafka's rules for them, and the internal topics."""

from __future__ import annotations

import re
from typing import Final

from gregor.protocol.errors import InvalidTopicError

MAX_NAME_LENGTH: Final = 249
CONSUMER_OFFSETS: Final = "__consumer_offsets"
TRANSACTION_STATE: Final = "__transaction_state"
INTERNAL_TOPICS: Final = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE})
_LEGAL: Final = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError, saying why, unless `name` is a legal topic name."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


def has_collision_chars(name: str) -> bool:
    """'.' and '_' collide in metric names, so Kafka warns about (and refuses) mixing them."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")
