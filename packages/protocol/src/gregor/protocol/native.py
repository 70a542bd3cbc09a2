"""The optional C extension `_records_speedups`, when it was built and is not disabled.

Each module with a C twin asks here for it and keeps its pure-Python reference otherwise;
`GREGOR_NO_EXTENSIONS=1` makes every such module use its reference.
"""

from __future__ import annotations

import importlib
import os
from typing import Any


def native_function(name: str) -> Any:
    """The extension's function `name`, or None (not built, or disabled)."""
    if os.environ.get("GREGOR_NO_EXTENSIONS"):
        return None
    try:
        module = importlib.import_module("gregor.protocol._records_speedups")
    except ImportError:
        return None
    return getattr(module, name)
