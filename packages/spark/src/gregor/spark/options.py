"""The data source's options, with spark-sql-kafka's names and meaning, checked up front.

Spark hands options over case-insensitively, so every name is looked up lower-cased.
`kafka.*` options go to gregor-client with the prefix taken off; the few that would break
the source's own bookkeeping (who decides offsets, how bytes are decoded) are refused with
the reason, as spark-sql-kafka refuses them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

EARLIEST = -2  # spark-sql-kafka's JSON offsets: -2 is earliest, -1 is latest
LATEST = -1

# The client options the source sets itself, and why a user may not.
_REFUSED = {
    "auto.offset.reset": "set the source option 'startingOffsets' to 'earliest' or 'latest' "
    "to say where to start",
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize them with DataFrame "
    "operations",
    "key.serializer": "keys are written as the key column's bytes or UTF-8 string",
    "value.serializer": "values are written as the value column's bytes or UTF-8 string",
    "enable.auto.commit": "the source keeps its offsets itself and commits none",
    "interceptor.classes": "interceptors would see records the source may read again",
}


class OptionError(ValueError):
    """An option that is missing, unknown to the rules, or has a value that cannot be."""


@dataclass(frozen=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    pattern: str

    def matches(self, topic: str) -> bool:
        # Java's Pattern.matcher(topic).matches(): the whole name.
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    partitions: tuple[tuple[str, int], ...]


Strategy = Subscribe | SubscribePattern | Assign

# Where a read starts or ends: earliest/latest everywhere, per-partition offsets (-2/-1
# allowed), one timestamp for every partition, or per-partition timestamps.
PartitionOffsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class Bound:
    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: PartitionOffsets = field(default_factory=dict)  # offsets or timestamps
    timestamp: int = 0


@dataclass(frozen=True)
class ReadOptions:
    client: dict[str, str]  # gregor-client's config: kafka.* with the prefix off
    strategy: Strategy
    starting: Bound
    ending: Bound | None  # None in a streaming read
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    by_timestamp_strategy: Literal["error", "latest"] = "error"
    poll_timeout_ms: int = 120_000

    @property
    def topics_known(self) -> tuple[str, ...]:
        """The topics named outright (subscribe, assign); () for a pattern."""
        if isinstance(self.strategy, Subscribe):
            return self.strategy.topics
        if isinstance(self.strategy, Assign):
            return tuple(dict.fromkeys(t for t, _ in self.strategy.partitions))
        return ()


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.*` options as gregor-client's config; refuses the ones the source owns."""
    config: dict[str, str] = {}
    for key, value in lowered(options).items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _REFUSED:
            raise OptionError(f"Kafka option '{name}' is not supported: {_REFUSED[name]}")
        config[name] = value
    if "bootstrap.servers" not in config:
        raise OptionError("option 'kafka.bootstrap.servers' must be specified")
    return config


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check a read's options and turn them into a ReadOptions."""
    opts = lowered(options)
    starting = _bound(opts, "starting", "latest" if streaming else "earliest")
    if streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise OptionError(f"option '{name}' is not valid in streaming queries")
        ending = None
    else:
        ending = _bound(opts, "ending", "latest")
        _refuse_in_batch(starting, "startingOffsets", LATEST, "latest")
        _refuse_in_batch(ending, "endingOffsets", EARLIEST, "earliest")
    strategy_name = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy_name not in ("error", "latest"):
        raise OptionError(
            f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"not {strategy_name!r}"
        )
    return ReadOptions(
        client=client_config(opts),
        strategy=_strategy(opts),
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        min_partitions=_positive(opts, "minpartitions"),
        max_records_per_partition=_positive(opts, "maxrecordsperpartition"),
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger"),
        include_headers=_bool(opts, "includeheaders", False),
        by_timestamp_strategy="latest" if strategy_name == "latest" else "error",
        poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms") or 120_000,
    )


def _strategy(opts: Mapping[str, str]) -> Strategy:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
            f"specified (given: {', '.join(given) or 'none'})"
        )
    name = given[0]
    value = opts[name].strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"no topics to subscribe to in option 'subscribe': {value!r}")
        return Subscribe(topics)
    if name == "subscribepattern":
        if not value:
            raise OptionError("option 'subscribePattern' is empty")
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is no regex: {exc}") from None
        return SubscribePattern(value)
    parsed = _json(value, "assign")
    if not isinstance(parsed, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) for p in ps) for ps in parsed.values()
    ):
        raise OptionError(
            f'option \'assign\' must be JSON like {{"topicA":[0,1],"topicB":[2,4]}}, not {value!r}'
        )
    partitions = tuple((topic, p) for topic, ps in parsed.items() for p in ps)
    if not partitions:
        raise OptionError(f"option 'assign' names no partitions: {value!r}")
    return Assign(partitions)


def _bound(opts: Mapping[str, str], side: str, default: str) -> Bound:
    """startingTimestamp > startingOffsetsByTimestamp > startingOffsets (and ending*)."""
    if f"{side}timestamp" in opts:
        raw = opts[f"{side}timestamp"]
        try:
            return Bound("timestamp", timestamp=int(raw))
        except ValueError:
            raise OptionError(f"option '{side}Timestamp' must be milliseconds: {raw!r}") from None
    if f"{side}offsetsbytimestamp" in opts:
        return Bound("timestamps", offsets=_partition_json(opts, f"{side}OffsetsByTimestamp"))
    raw = opts.get(f"{side}offsets", default).strip()
    if raw.lower() in ("earliest", "latest"):
        return Bound("earliest" if raw.lower() == "earliest" else "latest")
    if not raw.startswith("{"):
        raise OptionError(
            f"option '{side}Offsets' must be 'earliest', 'latest' or JSON like "
            f'{{"topicA":{{"0":23,"1":-1}}}}, not {raw!r}'
        )
    offsets = _partition_json(opts, f"{side}Offsets")
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(
                f"option '{side}Offsets' has offset {offset} for {topic}-{partition}: "
                "use -2 for earliest, -1 for latest, or an offset >= 0"
            )
    return Bound("offsets", offsets=offsets)


def _partition_json(opts: Mapping[str, str], name: str) -> PartitionOffsets:
    raw = opts[name.lower()]
    parsed = _json(raw, name)
    error = OptionError(
        f'option \'{name}\' must be JSON like {{"topicA":{{"0":23,"1":-1}}}}, not {raw!r}'
    )
    if not isinstance(parsed, dict):
        raise error
    out: PartitionOffsets = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise error
        for partition, value in partitions.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise error
            try:
                out[(topic, int(partition))] = value
            except ValueError:
                raise error from None
    return out


def _refuse_in_batch(bound: Bound, name: str, forbidden: int, word: str) -> None:
    if bound.kind == word:
        raise OptionError(f"option '{name}' can't be '{word}' for batch queries")
    if bound.kind == "offsets":
        for (topic, partition), offset in bound.offsets.items():
            if offset == forbidden:
                raise OptionError(
                    f"option '{name}' for {topic}-{partition} can't be {word} ({forbidden}) "
                    "for batch queries"
                )


def _json(raw: str, name: str) -> object:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise OptionError(f"option '{name}' is not JSON ({exc}): {raw!r}") from None


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option '{name}' must be true or false, not {raw!r}")


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, not {raw!r}")
    return value
