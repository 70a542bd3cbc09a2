"""Two-datacenter fault runs in the default suite: both datacenters up, dc2's mirror copying
dc1 exactly once and dc1's ETL loading it into its warehouse, while producers write to dc1
and each run's schedule strikes dc1's cluster and what reads it: the mirror killed, paused
and restarted, the ETL killed mid-batch, paused or its host cut off, the WAN cut. After
each run, dc1's topic, dc2's copy (read_committed) and the warehouse each hold every
acknowledged record once, in order, and nothing never sent.

`nox -s faults_two_dc -- --runs N --seed S` is the long variant."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.devcluster.netns import NetnsTopology
from gregor_testing.faultruns import TWO_DC_KINDS, runs, table, two_datacenters
from gregor_testing.topology import requires_netns

pytestmark = [requires_netns, pytest.mark.slow, pytest.mark.timeout(1800)]

RUNS = int(os.environ.get("GREGOR_TWO_DC_RUNS", "2"))
# Its two schedules strike the mirror (paused, killed), the ETL (killed, its host cut off),
# the WAN (twice), and dc1's controller (restarted) and a broker (killed). Seed 2472 cut a
# broker off instead, and CI once found a record of dc1 read twice (run 2, seed 2474), most
# likely librdkafka#4953 (a record sent again under a new producer epoch), which the
# checker now tells apart from the brokers' duplicates when their logs show it (`resent`).
# To replay: `nox -s faults_two_dc -- --seed 2472 --runs 2 --seconds 20 --faults 1
# --service-faults 3`.
SEED = int(os.environ.get("GREGOR_TWO_DC_SEED", "2554"))
SECONDS = 20.0
SERVICE_FAULTS = 3


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsTopology]:
    with two_datacenters(tmp_path_factory.mktemp("two-dc")) as topology:
        yield topology


def test_the_mirror_and_the_etl_copy_every_acknowledged_record_once_through_faults(
    both: NetnsTopology, tmp_path: Path
) -> None:
    done = runs(
        both, RUNS, SEED, SECONDS, tmp_path, 1, kinds=TWO_DC_KINDS, service_faults=SERVICE_FAULTS
    )
    rows = table([run.summary for run in done])
    print(rows)
    for run in done:
        where = f"run {run.number} (seed {run.seed}, history {run.history})"
        assert run.report.acked > 0, rows
        assert sorted(run.copies) == ["etl", "mirror"], where
        for name, r in [("dc1", run.report), *sorted(run.copies.items())]:
            what = f"{where}, {name}"
            assert r.lost == [], f"{what}: acknowledged, never read: {r.lost[:20]}"
            assert r.duplicates == [], f"{what}: read twice: {r.duplicates[:20]}"
            assert r.reordered == [], f"{what}: out of order: {r.reordered[:20]}"
            assert r.phantom == [], f"{what}: never sent: {r.phantom[:20]}"
            assert r.incomplete == [], f"{what}: {r.incomplete}"
        # The ETL keeps the source's offsets (the mirror's copy has offsets of its own).
        for name, r in [("dc1", run.report), ("etl", run.copies["etl"])]:
            assert r.misplaced == [], f"{where}, {name}: not where acknowledged: {r.misplaced}"
