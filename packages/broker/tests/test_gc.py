"""The broker sets its long-lived objects aside from the cyclic garbage collector (in a
process of its own here: freezing is for the whole interpreter)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import gc
from gregor.broker.__main__ import set_aside_long_lived_objects
oldest = len(gc.get_objects(generation=2))
frozen = set_aside_long_lived_objects()
print(frozen, oldest, len(gc.get_objects(generation=2)), gc.get_freeze_count())
"""


def test_the_objects_made_at_start_are_frozen_and_leave_the_oldest_generation() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    frozen, oldest_before, oldest_after, count = map(int, done.stdout.split())
    assert frozen == count > 20_000  # the imports of gregor.broker alone
    assert oldest_before > 10_000 and oldest_after < 100  # a full pass has little to look at
