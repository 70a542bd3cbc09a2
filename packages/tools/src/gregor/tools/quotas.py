"""`gregor quotas`: describe and alter client quotas (kafka-configs.sh's --entity-type users /
clients, and their (user, client-id) pairs), one table row per entity.

An entity is a user, a client id, or both; `--user-default` / `--client-default` name
Kafka's `<default>` entities. describe lists every entity the names select, pairs included
(with only --user, the user's own quotas and those of its client ids).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from gregor.client import AdminClient
from gregor.client.admin import ClientQuotaEntity, ClientQuotaFilterComponent, QuotaMatch
from gregor.tools.common import Output, ToolError, add_connection, admin, key_values, names

ENTITY_TYPES = ("user", "client-id")
DEFAULT = "<default>"
# Kafka's client quota configs, in the order the table shows them (others follow).
KNOWN = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def register(commands: argparse._SubParsersAction[Any]) -> None:
    quotas = commands.add_parser("quotas", help="describe and alter client quotas")
    actions = quotas.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, run, text in (
        ("describe", run_describe, "the quotas of users, client ids and their pairs"),
        ("alter", run_alter, "set and delete the quotas of one entity"),
    ):
        action = actions.add_parser(name, help=text)
        add_connection(action)
        user = action.add_mutually_exclusive_group()
        user.add_argument("--user", metavar="NAME")
        user.add_argument("--user-default", action="store_true", help="the <default> user")
        client = action.add_mutually_exclusive_group()
        client.add_argument("--client-id", metavar="ID")
        client.add_argument("--client-default", action="store_true", help="the <default> client id")
        action.set_defaults(run=run)
    alter = actions.choices["alter"]
    alter.add_argument("--add-config", action="append", metavar="K=V,K=V")
    alter.add_argument("--delete-config", action="append", metavar="K,K")


def _named(args: argparse.Namespace) -> dict[str, str | None]:
    """The entity types named: a name, or None for the default entity."""
    out: dict[str, str | None] = {}
    if args.user is not None or args.user_default:
        out["user"] = args.user
    if args.client_id is not None or args.client_default:
        out["client-id"] = args.client_id
    return out


def run_describe(args: argparse.Namespace) -> int:
    components = [
        ClientQuotaFilterComponent(kind, QuotaMatch.DEFAULT)
        if name is None
        else ClientQuotaFilterComponent(kind, QuotaMatch.EXACT, name)
        for kind, name in _named(args).items()
    ]
    with admin(args) as client:
        document = describe(client, components)
    out = Output(args)
    if out.json:
        out.emit(document)
        return 0
    keys = [k for k in KNOWN if any(k in e["quotas"] for e in document)]
    keys += sorted({k for e in document for k in e["quotas"]} - set(keys))
    rows = [
        [
            *(_shown(e["entity"], kind) for kind in ENTITY_TYPES),
            *(_number(e["quotas"].get(k)) for k in keys),
        ]
        for e in document
    ]
    out.table([t.upper() for t in ENTITY_TYPES] + [k.upper() for k in keys], rows)
    return 0


def describe(
    client: AdminClient, components: list[ClientQuotaFilterComponent], strict: bool = False
) -> list[dict[str, Any]]:
    """Each entity's quotas: {"entity": {"user": "alice"}, "quotas": {...}}; a None name is
    the default entity."""
    found = client.describe_client_quotas(components, strict=strict)
    entries = [(entity.as_dict(), values) for entity, values in found.items()]
    return [
        {"entity": entity, "quotas": dict(sorted(values.items()))}
        for entity, values in sorted(entries, key=lambda e: _order(e[0]))
    ]


def _order(entity: Mapping[str, str | None]) -> tuple[tuple[int, str], ...]:
    """Users, then client ids; a name's own entity before its pairs, `<default>` last."""

    def rank(kind: str) -> tuple[int, str]:
        if kind not in entity:
            return (0, "")
        name = entity[kind]
        return (2, "") if name is None else (1, name)

    return tuple(rank(kind) for kind in ENTITY_TYPES)


def _shown(entity: Mapping[str, str | None], kind: str) -> str | None:
    if kind not in entity:
        return None
    return entity[kind] or DEFAULT


def _number(value: float | None) -> str | None:
    if value is None:
        return None
    return str(int(value)) if value.is_integer() else str(value)


def quota_changes(sets: Mapping[str, str], deletes: list[str]) -> dict[str, float | None]:
    """--add-config values as numbers, and --delete-config keys as None (removed)."""
    try:
        changes: dict[str, float | None] = {k: float(v) for k, v in sets.items()}
    except ValueError:
        raise ToolError(f"quota values are numbers: {dict(sets)}") from None
    changes.update(dict.fromkeys(deletes))
    if not changes:
        raise ToolError("nothing to alter: give --add-config or --delete-config")
    return changes


def run_alter(args: argparse.Namespace) -> int:
    entity = _named(args)
    if not entity:
        raise ToolError("alter needs --user/--user-default, --client-id/--client-default, or both")
    changes = quota_changes(key_values(args.add_config, "--add-config"), names(args.delete_config))
    with admin(args) as client:
        client.alter_client_quotas({ClientQuotaEntity(entity): changes})
    shown = ", ".join(f"{kind} {name or DEFAULT}" for kind, name in entity.items())
    Output(args).done(
        f"Completed updating the quotas of {shown}.",
        {"altered": {"entity": entity, "quotas": changes}},
    )
    return 0
