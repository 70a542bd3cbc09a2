"""Crash tests with real processes: a child appends in a loop and is SIGKILLed at random
moments; the reopened log must hold a prefix of what was appended, every flushed batch, and
no corrupt batch. Then torn tails: garbage appended and bits flipped must be cut off."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from crash_child import TXN_CONFIG
from storage_testing import check_transactions

from gregor.protocol.records import iter_batches, scan_batches, verify_crc
from gregor.storage import FetchIsolation, LogConfig, open_log

CHILD = Path(__file__).with_name("crash_child.py")


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()


def _run_and_kill(
    directory: Path,
    children: list[subprocess.Popen[str]],
    rng: random.Random,
    *mode: str,
) -> int:
    """Start the child (in `mode`, see crash_child.py), let it append for a random while,
    SIGKILL it; returns the highest recovery point it reported."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(rng.choice([3, 10, 40])), *mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    children.append(child)
    assert child.stdout is not None
    first = child.stdout.readline()
    assert first.startswith("opened"), first
    deadline = time.monotonic() + rng.uniform(0.05, 0.6)
    flushed = 0
    os.set_blocking(child.stdout.fileno(), False)
    while time.monotonic() < deadline and child.poll() is None:
        line = child.stdout.readline()
        if line.startswith("flushed"):
            flushed = max(flushed, int(line.split()[1]))
        elif not line:
            time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    for line in child.stdout.read().splitlines() if child.stdout else []:
        if line.startswith("flushed"):
            flushed = max(flushed, int(line.split()[1]))
    assert child.returncode == -signal.SIGKILL
    return flushed


def _check_prefix(directory: Path) -> int:
    """Reopen (recovering), check every batch and record; returns the log end offset."""
    log = open_log(directory, LogConfig(), recovery_point=0)
    try:
        for segment in log.segments:
            data = segment.log_path.read_bytes()
            for pos, header in scan_batches(data):
                verify_crc(data, pos, header)
        offset = 0
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20, FetchIsolation.LOG_END).records.read()
            for batch in iter_batches(data):
                for record in batch:
                    assert record.offset == offset
                    assert record.value == str(offset).encode() * 10
                    offset += 1
        return log.log_end_offset
    finally:
        log.close()


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_a_prefix(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    directory = tmp_path / "crash-0"
    rng = random.Random(20240607)
    previous_end = 0
    for _round in range(5):
        flushed = _run_and_kill(directory, children, rng)
        end = _check_prefix(directory)
        assert end >= flushed  # every flushed batch survived
        assert end >= previous_end  # and nothing before the kill was lost either
        previous_end = end
    assert previous_end > 0


@pytest.mark.parametrize("damage", ["garbage", "bit flip", "torn batch"])
def test_damaged_tails_are_cut_at_the_last_valid_batch(
    tmp_path: Path, children: list[subprocess.Popen[str]], damage: str
) -> None:
    directory = tmp_path / "torn-0"
    rng = random.Random(damage)
    _run_and_kill(directory, children, rng)
    end = _check_prefix(directory)
    files = sorted(directory.glob("*.log"))
    if damage == "garbage":
        last = files[-1]
        last.write_bytes(last.read_bytes() + rng.randbytes(3000))
        expected_end = end
    else:
        # the last segment with two batches or more (a later one may have just rolled)
        last = next(f for f in reversed(files) if len(list(scan_batches(f.read_bytes()))) >= 2)
        data = bytearray(last.read_bytes())
        batches = list(scan_batches(bytes(data)))
        if damage == "bit flip":
            victim_pos, victim = batches[-2]
            bit = rng.randrange((victim_pos + 21) * 8, (victim_pos + victim.size) * 8)
            data[bit // 8] ^= 1 << (bit % 8)
            expected_end = victim.base_offset
        else:  # the file lost the end of its last batch
            del data[batches[-1][0] + 30 :]
            expected_end = batches[-1][1].base_offset
        last.write_bytes(bytes(data))
    assert _check_prefix(directory) == expected_end
    # and the log goes on from there
    flushed = _run_and_kill(directory, children, rng)
    assert _check_prefix(directory) >= max(flushed, expected_end)


@pytest.mark.slow
def test_sigkill_in_the_middle_of_transactions_restores_them(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """Four producers' transactions, SIGKILLed at random moments (open ones among them):
    after each restart the open transactions, the LSO, the `.txnindex` and what a
    read_committed consumer sees agree with the transactions worked out from the
    recovered log's batches, and the next run finishes what the last one left open."""
    directory = tmp_path / "txn-0"
    rng = random.Random(20261124)
    recovery_point = 0
    killed_inside = 0
    for round_ in range(5):
        flushed = _run_and_kill(directory, children, rng, "txn", str(round_), str(recovery_point))
        log = open_log(
            directory,
            LogConfig.from_properties(TXN_CONFIG),
            recovery_point=max(flushed, recovery_point),
        )
        try:
            assert log.log_end_offset >= flushed
            model = check_transactions(log)
            killed_inside += bool(model.ongoing)
            recovery_point = log.log_end_offset  # closed cleanly below
        finally:
            log.close()
            assert model.aborted and model.committed
    assert killed_inside > 0
