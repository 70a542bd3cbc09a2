"""The optional C extensions of Gregor's packages, when they were built and can be used.

Each module with a C twin asks here for it and keeps its pure-Python reference otherwise:

- `GREGOR_NO_EXTENSIONS=1` makes every such module use its reference (no log line).
- The twins write `__slots__` by byte offset and call `threading.Lock` through its C
  functions, which holds on the CPython versions in `SUPPORTED_CPYTHON` with the GIL. Any
  other interpreter (PyPy, a free-threaded build running without the GIL, a CPython outside
  that range) gets the references, decided here at import, with one warning.
- An extension that was not built (no compiler at install time) is logged once as a
  warning that names the slower path; `native_available(module)` says whether it is in use.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

PROTOCOL_EXTENSION = "gregor.protocol._records_speedups"

# The CPython versions (first, last) the extensions are built and tested on.
SUPPORTED_CPYTHON = ((3, 11), (3, 13))


def unsupported_interpreter() -> str | None:
    """Why the C extensions must not be used by this interpreter, or None when they can."""
    name = sys.implementation.name
    if name != "cpython":
        return f"{name} is not CPython"
    version = tuple(sys.version_info[:2])
    first, last = SUPPORTED_CPYTHON
    if not first <= version <= last:
        return f"CPython {_dotted(version)} is not {_dotted(first)} to {_dotted(last)}"
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if gil_enabled is not None and not gil_enabled():
        return "this free-threaded CPython runs without the GIL"
    return None


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@functools.cache
def _interpreter_allows() -> bool:
    reason = unsupported_interpreter()
    if reason is not None:
        log.warning("Gregor's C extensions are not used (%s): pure-Python code instead", reason)
    return reason is None


@functools.cache
def _extension(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except (ImportError, AttributeError) as exc:  # AttributeError: a capsule it needs is missing
        log.warning(
            "%s is not available (%s): its package uses the slower pure-Python code instead; "
            "reinstall it with a C compiler and the Python headers to get it",
            module,
            exc,
        )
        return None


def _usable(module: str) -> ModuleType | None:
    if os.environ.get("GREGOR_NO_EXTENSIONS") or not _interpreter_allows():
        return None
    return _extension(module)


def native_function(name: str, module: str = PROTOCOL_EXTENSION) -> Any:
    """The function `name` of the C extension `module`, or None (not built, or not used)."""
    extension = _usable(module)
    # A build older than this code may lack the function: then it is not there either.
    return None if extension is None else getattr(extension, name, None)


def native_available(module: str = PROTOCOL_EXTENSION) -> bool:
    """Whether the C extension `module` is built and used (False: the pure-Python path)."""
    return _usable(module) is not None
