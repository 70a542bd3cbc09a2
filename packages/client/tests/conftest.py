"""Make this directory's helper modules (client_scripted) importable from the tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from client_scripted import ScriptedCluster, scripted_cluster


@pytest.fixture
def cluster() -> Iterator[ScriptedCluster]:
    with scripted_cluster(1) as running:
        yield running


@pytest.fixture
def cluster3() -> Iterator[ScriptedCluster]:
    with scripted_cluster(3) as running:
        yield running
