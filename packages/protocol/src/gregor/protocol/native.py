"""The optional C extensions of Gregor's packages, when they were built and are not disabled.

Each module with a C twin asks here for it and keeps its pure-Python reference otherwise;
`GREGOR_NO_EXTENSIONS=1` makes every such module use its reference. An extension that was
not built (no compiler at install time) is logged once, not an error.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

PROTOCOL_EXTENSION = "gregor.protocol._records_speedups"


@functools.cache
def _extension(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except (ImportError, AttributeError) as exc:  # AttributeError: a capsule it needs is missing
        log.info("%s is not available (%s): using the pure-Python code instead", module, exc)
        return None


def native_function(name: str, module: str = PROTOCOL_EXTENSION) -> Any:
    """The function `name` of the C extension `module`, or None (not built, or disabled)."""
    if os.environ.get("GREGOR_NO_EXTENSIONS"):
        return None
    extension = _extension(module)
    # A build older than this code may lack the function: then it is not there either.
    return None if extension is None else getattr(extension, name, None)
