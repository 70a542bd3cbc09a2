"""`gregor configs`: describe and alter the configs of topics and brokers, and the quotas of
users and client ids (kafka-configs.sh)."""

from __future__ import annotations

import argparse
from typing import Any

from gregor.client import AdminClient
from gregor.client.admin import (
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    QuotaMatch,
    ResourceType,
)
from gregor.tools import quotas
from gregor.tools.common import (
    Output,
    ToolError,
    add_connection,
    admin,
    key_values,
    names,
)

RESOURCES = {"topics": ResourceType.TOPIC, "brokers": ResourceType.BROKER}
# Quota entity types by kafka-configs' --entity-type, as DescribeClientQuotas names them.
QUOTA_ENTITIES = {"users": "user", "clients": "client-id"}
DYNAMIC = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG,
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
}


def register(commands: argparse._SubParsersAction[Any]) -> None:
    configs = commands.add_parser("configs", help="describe and alter configs and quotas")
    actions = configs.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, run, text in (
        ("describe", run_describe, "configs of topics and brokers, quotas of users and clients"),
        ("alter", run_alter, "set and delete configs or quotas"),
    ):
        action = actions.add_parser(name, help=text)
        add_connection(action)
        action.add_argument("--entity-type", required=True, choices=[*RESOURCES, *QUOTA_ENTITIES])
        entity = action.add_mutually_exclusive_group()
        entity.add_argument("--entity-name", help="a topic, broker id, user or client id")
        entity.add_argument(
            "--entity-default", action="store_true", help="the default broker, user or client"
        )
        action.set_defaults(run=run)
    describe = actions.choices["describe"]
    describe.add_argument("--all", action="store_true", help="every config, defaults included")
    alter = actions.choices["alter"]
    alter.add_argument("--add-config", action="append", metavar="K=V,K=[A,B]")
    alter.add_argument("--delete-config", action="append", metavar="K,K")


def _entity_name(args: argparse.Namespace) -> str | None:
    """The entity named, "" for --entity-default, None for every entity of the type."""
    return "" if args.entity_default else args.entity_name


def run_describe(args: argparse.Namespace) -> int:
    name = _entity_name(args)
    with admin(args) as client:
        if args.entity_type in QUOTA_ENTITIES:
            document = describe_quotas(client, args.entity_type, name)
        else:
            document = describe_configs(client, args.entity_type, name, args.all)
    out = Output(args)
    if out.json:
        out.emit(document)
        return 0
    for entity in document:
        title = f"{args.entity_type} {entity['entity_name'] or '<default>'}"
        rows = [
            [key, "(sensitive)" if c.get("sensitive") else c["value"], c.get("source", "")]
            for key, c in entity["configs"].items()
        ]
        out.table(["NAME", "VALUE", "SOURCE"], rows, title=title)
    return 0


def describe_configs(
    client: AdminClient, entity_type: str, name: str | None, every: bool
) -> list[dict[str, Any]]:
    kind = RESOURCES[entity_type]
    if name is not None:
        wanted = [name]
    elif kind is ResourceType.TOPIC:
        wanted = client.list_topics()
    else:
        wanted = [str(b.node_id) for b in client.describe_cluster().brokers]
    found = client.describe_configs([ConfigResource(kind, n) for n in wanted])
    return [
        {
            "entity_type": entity_type,
            "entity_name": n,
            "configs": {
                key: _entry(e)
                for key, e in sorted(found[ConfigResource(kind, n)].items())
                if every or e.source in DYNAMIC
            },
        }
        for n in wanted
    ]


def _entry(entry: ConfigEntry) -> dict[str, Any]:
    return {
        "value": None if entry.sensitive else entry.value,
        "source": entry.source.name,
        "read_only": entry.read_only,
        "sensitive": entry.sensitive,
    }


def describe_quotas(
    client: AdminClient, entity_type: str, name: str | None
) -> list[dict[str, Any]]:
    kind = QUOTA_ENTITIES[entity_type]
    if name is None:  # every entity of the type
        component = ClientQuotaFilterComponent(kind, QuotaMatch.ANY)
    elif name == "":  # --entity-default
        component = ClientQuotaFilterComponent(kind, QuotaMatch.DEFAULT)
    else:
        component = ClientQuotaFilterComponent(kind, QuotaMatch.EXACT, name)
    return [
        {
            "entity_type": entity_type,
            "entity_name": found["entity"].get(kind) or "",
            "configs": {key: {"value": str(value)} for key, value in found["quotas"].items()},
        }
        for found in quotas.describe(client, [component], strict=True)
    ]


def run_alter(args: argparse.Namespace) -> int:
    name = _entity_name(args)
    if name is None:
        raise ToolError("alter needs --entity-name or --entity-default")
    sets = key_values(args.add_config, "--add-config")
    deletes = names(args.delete_config)
    if not sets and not deletes:
        raise ToolError("nothing to alter: give --add-config or --delete-config")
    with admin(args) as client:
        if args.entity_type in QUOTA_ENTITIES:
            entity = ClientQuotaEntity({QUOTA_ENTITIES[args.entity_type]: name or None})
            client.alter_client_quotas({entity: quotas.quota_changes(sets, deletes)})
        else:
            resource = ConfigResource(RESOURCES[args.entity_type], name)
            if resource.type is ResourceType.TOPIC:
                client.describe_topics([name])  # an unknown topic, named first
            changes: dict[str, str | None] = {**sets, **dict.fromkeys(deletes)}
            client.alter_configs({resource: changes})
    shown = name or "<default>"
    Output(args).done(
        f"Completed updating config for {args.entity_type} {shown}.",
        {"altered": {"entity_type": args.entity_type, "entity_name": shown}},
    )
    return 0
