"""Java `.properties` files, the format of Kafka's `server.properties`.

The rules of java.util.Properties.load: `#` and `!` start comment lines; a key ends at the
first unescaped `=`, `:` or whitespace, and whitespace around the separator is skipped; a
line ending in an odd number of backslashes continues on the next line (its leading
whitespace dropped); `\\t \\n \\r \\f \\uXXXX` are escapes and any other escaped character
stands for itself. A later duplicate key wins.
"""

from __future__ import annotations

from pathlib import Path

from gregor.protocol.errors import InvalidConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WHITESPACE = " \t\f"


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, logical line) pairs, continuations joined."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(_WHITESPACE) if pending else raw
        if not pending:
            stripped = line.lstrip(_WHITESPACE)
            if not stripped or stripped[0] in "#!":
                continue
            line = stripped
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending.append(line[:-1])
            continue
        pending.append(line)
        out.append((start, "".join(pending)))
        pending = []
    if pending:
        out.append((start, "".join(pending)))
    return out


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise InvalidConfigError(f"{where}: malformed \\uXXXX escape {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """Key and value of a logical line, still escaped."""
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    if i < len(line) and line[i] in "=:":
        return key, line[i + 1 :].lstrip(_WHITESPACE)
    rest = line[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):  # "key = value": the separator after whitespace
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The key/value pairs of a properties text; `source` names it in error messages."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        key, value = _split(line)
        out[_unescape(key, where)] = _unescape(value, where)
    return out


def load_properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidConfigError(f"{path} is not UTF-8 text: {exc}") from exc
    return parse_properties(text, str(path))


def parse_override(text: str) -> tuple[str, str]:
    """A `key=value` command-line override."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InvalidConfigError(f"override {text!r} must have the form key=value")
    return key.strip(), value.strip()
