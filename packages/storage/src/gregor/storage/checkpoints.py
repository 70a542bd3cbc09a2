"""Kafka's small text files: offset checkpoints, leader epochs, partition and broker metadata.

- Checkpoint files (`recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
  `log-start-offset-checkpoint`, `cleaner-offset-checkpoint`, `leader-epoch-checkpoint`): a
  version line (0), a count line, then one entry per line with space-separated fields.
- `partition.metadata`: `version: 0` and `topic_id: <id>` lines, the topic id in Kafka's
  base64url form without padding.
- `meta.properties`: a Java properties file with `version`, `broker.id`, `cluster.id`.

Files are replaced atomically (temporary file, fsync, rename). A file that does not parse
raises `CorruptCheckpointError` naming the file and the line.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final, Generic, TypeVar

from gregor.storage.files import atomic_write

T = TypeVar("T")

RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT: Final = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT: Final = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
PARTITION_METADATA: Final = "partition.metadata"
META_PROPERTIES: Final = "meta.properties"

_SPACES = re.compile(r"\s+")


class CorruptCheckpointError(Exception):
    """A checkpoint or metadata file that does not parse."""


class CheckpointFile(Generic[T]):
    """A versioned list of entries, one per line, replaced atomically on every write."""

    def __init__(
        self,
        path: Path,
        version: int,
        to_line: Callable[[T], str],
        from_fields: Callable[[list[str]], T],
        fields: int,
    ) -> None:
        self.path = path
        self.version = version
        self._to_line = to_line
        self._from_fields = from_fields
        self._fields = fields

    def write(self, entries: Iterable[T], *, sync: bool = True) -> None:
        items = list(entries)
        lines = [str(self.version), str(len(items)), *(self._to_line(e) for e in items)]
        atomic_write(self.path, ("\n".join(lines) + "\n").encode(), sync=sync)

    def read(self) -> list[T]:
        """The entries; an absent or empty file has none."""
        try:
            text = self.path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return []
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"{self.path} is not UTF-8 text") from None
        lines = text.splitlines()
        if not lines:
            return []
        version = self._int(lines[0])
        if version != self.version:
            raise CorruptCheckpointError(
                f"Unrecognised version {version} in checkpoint file {self.path}, "
                f"expected {self.version}"
            )
        if len(lines) < 2:
            return []
        count = self._int(lines[1])
        entries: list[T] = []
        for line in lines[2:]:
            fields = _SPACES.split(line.strip())
            if len(fields) != self._fields:
                raise CorruptCheckpointError(
                    f"Malformed line in checkpoint file {self.path}: {line}"
                )
            try:
                entries.append(self._from_fields(fields))
            except ValueError:
                raise CorruptCheckpointError(
                    f"Malformed line in checkpoint file {self.path}: {line}"
                ) from None
        if len(entries) != count:
            raise CorruptCheckpointError(
                f"Expected {count} entries in checkpoint file {self.path}, found {len(entries)}"
            )
        return entries

    def _int(self, line: str) -> int:
        try:
            return int(line.strip())
        except ValueError:
            raise CorruptCheckpointError(
                f"Malformed line in checkpoint file {self.path}: {line}"
            ) from None


TopicPartition = tuple[str, int]


class OffsetCheckpointFile:
    """`topic partition offset` lines: recovery points, high watermarks, start offsets."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[str, int, int]] = CheckpointFile(
            path,
            0,
            lambda e: f"{e[0]} {e[1]} {e[2]}",
            lambda f: (f[0], int(f[1]), int(f[2])),
            3,
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int], *, sync: bool = True) -> None:
        self._file.write(((t, p, o) for (t, p), o in sorted(offsets.items())), sync=sync)

    def read(self) -> dict[TopicPartition, int]:
        return {(t, p): o for t, p, o in self._file.read()}


def leader_epoch_file(path: Path) -> CheckpointFile[tuple[int, int]]:
    """`epoch start_offset` lines."""
    return CheckpointFile(path, 0, lambda e: f"{e[0]} {e[1]}", lambda f: (int(f[0]), int(f[1])), 2)


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: base64url of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"{text!r} is not a base64url topic id") from None
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a 16-byte topic id")
    return uuid.UUID(bytes=raw)


def write_partition_metadata(directory: Path, topic_id: uuid.UUID, *, sync: bool = True) -> None:
    text = f"version: 0\ntopic_id: {encode_topic_id(topic_id)}"
    atomic_write(directory / PARTITION_METADATA, text.encode(), sync=sync)


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id in `partition.metadata`, or None when there is no such file."""
    path = directory / PARTITION_METADATA
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path} is not UTF-8 text") from None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            raise CorruptCheckpointError(f"Malformed line in {path}: {line}")
        fields[key.strip()] = value.strip()
    try:
        version = int(fields.get("version", ""))
        if version < 0:
            raise ValueError(version)
        return decode_topic_id(fields["topic_id"])
    except (KeyError, ValueError) as exc:
        raise CorruptCheckpointError(f"Malformed partition metadata in {path}: {exc}") from None


# -- Java properties (meta.properties) ---------------------------------------------------------

_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Java's `Properties.load` format: comments, `=`, `:` or space separators, escapes and
    continuation lines."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        if (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    props: dict[str, str] = {}
    for line in logical:
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key, j = line[:i], i
        while j < len(line) and line[j] in " \t\f":
            j += 1
        if j < len(line) and line[j] in "=:":
            j += 1
            while j < len(line) and line[j] in " \t\f":
                j += 1
        props[_unescape(key)] = _unescape(line[j:])
    return props


def _escape(text: str, *, key: bool) -> str:
    out: list[str] = []
    for index, ch in enumerate(text):
        if ch in "\\=:#!":
            out.append("\\" + ch)
        elif ch == " " and (key or index == 0):
            out.append("\\ ")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str], comment: str = "") -> str:
    lines = [f"#{comment}"]
    lines += [f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def read_meta_properties(directory: Path) -> dict[str, str] | None:
    """The `meta.properties` of a log directory, or None when it has none."""
    path = directory / META_PROPERTIES
    try:
        return parse_properties(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path} is not UTF-8 text") from None


def write_meta_properties(directory: Path, props: Mapping[str, str]) -> None:
    text = format_properties(props, "Written by gregor-storage")
    atomic_write(directory / META_PROPERTIES, text.encode("utf-8"))
