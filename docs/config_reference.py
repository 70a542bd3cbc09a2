"""Writes docs/configuration.md from the config declarations, so the reference cannot drift.

    python docs/config_reference.py          # rewrite docs/configuration.md
    python docs/config_reference.py --check  # exit 1 if it is stale (tests/docs runs this)

`nox -s docs` runs the first. The broker's and storage's settings are declared in
gregor.broker.config and gregor.storage.config (gregor.storage.settings), the clients' in
gregor.client.config; each with its key, default, rule and a one-line doc.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from gregor.broker.config import DYNAMIC_BROKER_CONFIGS, IGNORED_SETTINGS, BrokerConfig
from gregor.client.config import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig
from gregor.storage.config import (
    MANAGER_SETTINGS,
    PASSTHROUGH_SETTINGS,
    SYNONYM_SETTINGS,
    LogConfig,
)
from gregor.storage.settings import Setting, declared, to_text

TARGET = Path(__file__).with_name("configuration.md")

INTRO = """\
# Configuration reference

Every key Gregor accepts, with its default and meaning. The names are Kafka's, so a
`server.properties` or client config written for Kafka carries over.

This file is generated from the config declarations (`gregor.broker.config`,
`gregor.storage.config`, `gregor.client.config`) by `nox -s docs`
(`docs/config_reference.py`); a test fails when it is stale, so edit the declarations, not
this file.
"""

BROKER = """\
## Broker

A broker reads a Java properties file and `--override key=value` pairs:
`gregor-broker server.properties [--override key=value ...]`. A sample is
[infra/config/server.properties](../infra/config/server.properties). Every value is
checked at startup; an invalid one stops the broker with a message naming the key, the
value and the rule. A key not listed here is logged ("supplied but isn't a known config")
and ignored, as Kafka does.
"""

STORAGE = """\
### The log manager (gregor-storage)
"""

SYNONYMS = """\
### Broker-wide topic defaults

The defaults of the [topic settings](#topics). *Dynamic*: they may also be changed at run
time, per broker or cluster-wide, with AlterConfigs or IncrementalAlterConfigs (for
example `kafka-configs.sh --alter --entity-type brokers --entity-default`).
"""

IGNORED = """\
### Accepted without effect

Kafka settings a broker accepts so that Kafka's files start unchanged, and does not act on.
"""

TOPICS = """\
## Topics

Set when a topic is created (CreateTopics' configs, `kafka-topics.sh --config`) or later
with AlterConfigs / IncrementalAlterConfigs; a topic without an override takes the
broker-wide default above. DescribeConfigs reports each with its source.
"""

KEPT = """\
### Kept without effect

Accepted, stored and described, not acted on.
"""

CLIENTS = """\
## Clients

`Producer`, `Consumer` and `AdminClient` (and their async twins) take a dict of these keys;
values may be Python values or the Java client's strings. An unknown key is an error that
suggests the closest valid one.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(rows: Iterable[tuple[str, str, str]]) -> str:
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{key}` | {_cell(default)} | {_cell(doc)} |" for key, default, doc in rows]
    return "\n".join(lines) + "\n"


def _server_rows(settings: Iterable[Setting], broker: bool = True) -> list[tuple[str, str, str]]:
    rows = []
    for s in settings:
        dynamic = broker and s.key in DYNAMIC_BROKER_CONFIGS
        doc = s.doc + (" *Dynamic.*" if dynamic else "")
        rows.append((s.key, s.default_doc, doc))
    return rows


def _client_default(value: Any) -> str:
    text = to_text(value)
    return "none" if text is None else f"`{text}`" if text else '`""`'


def _client_rows(cls: type, base: type | None) -> list[tuple[str, str, str]]:
    inherited = {a.name: a for a in attrs.fields(base)} if base else {}
    rows = []
    for attribute in attrs.fields(cls):
        item = attribute.metadata.get("kafka")
        if item is None:
            continue
        if attribute.name in inherited and inherited[attribute.name].default == attribute.default:
            continue
        rows.append((item.name, _client_default(attribute.default), item.doc))
    return rows


def render() -> str:
    broker = [s for _, s in declared(BrokerConfig).values()]
    topic = [s for _, s in declared(LogConfig).values()]
    listed = {*declared(BrokerConfig), *MANAGER_SETTINGS}
    synonyms = [s for key, s in SYNONYM_SETTINGS.items() if key not in listed]
    parts = [
        INTRO,
        BROKER,
        _table(_server_rows(broker)),
        STORAGE,
        _table(_server_rows(MANAGER_SETTINGS.values())),
        SYNONYMS,
        _table(_server_rows(synonyms)),
        IGNORED,
        _table(_server_rows(IGNORED_SETTINGS.values())),
        TOPICS,
        _table(_server_rows(topic, broker=False)),
        KEPT,
        _table(_server_rows(PASSTHROUGH_SETTINGS.values(), broker=False)),
        CLIENTS,
        "### Every client\n",
        _table(_client_rows(ClientConfig, None)),
        "### Producer\n",
        _table(_client_rows(ProducerConfig, ClientConfig)),
        "### Consumer\n",
        _table(_client_rows(ConsumerConfig, ClientConfig)),
        "### Admin client\n",
        _table(_client_rows(AdminConfig, ClientConfig)),
    ]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET} is stale: run `nox -s docs`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
