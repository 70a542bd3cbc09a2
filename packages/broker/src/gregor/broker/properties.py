"""Reading `server.properties` (Java properties, parsed by gregor-storage) and `--override`s."""

from __future__ import annotations

from pathlib import Path

from gregor.protocol.errors import InvalidConfigError
from gregor.storage.checkpoints import parse_properties


def load_properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidConfigError(f"{path} is not UTF-8 text: {exc}") from exc
    return parse_properties(text)


def parse_override(text: str) -> tuple[str, str]:
    """A `key=value` command-line override."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InvalidConfigError(f"override {text!r} must have the form key=value")
    return key.strip(), value.strip()
