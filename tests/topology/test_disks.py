"""The brokers' small disks (`gregor.devcluster.disks`): a tmpfs filled up as a fault,
freed, and unmounted by whoever cleans the folder."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from gregor.devcluster import disks
from gregor_testing.topology import requires_netns

pytestmark = requires_netns  # root, as for the namespaces


def test_a_filled_disk_refuses_writes_until_freed(tmp_path: Path) -> None:
    data = tmp_path / "dc1-broker1" / "data"
    disks.mount(data, 4)
    try:
        disks.mount(data, 4)  # already there: not mounted twice
        assert disks.mounts_under(tmp_path) == [data]
        (data / "segment").write_bytes(b"x" * 10_000)
        assert disks.fill(data) > 3 << 20
        with pytest.raises(OSError) as full, (data / "segment").open("ab") as segment:
            segment.write(b"x" * 10_000)
        assert full.value.errno == errno.ENOSPC
        disks.free(data)
        (data / "segment").write_bytes(b"y" * 10_000)
        assert (data / "segment").read_bytes() == b"y" * 10_000
    finally:
        assert disks.unmount_under(tmp_path) == [data]
    assert disks.mounts_under(tmp_path) == []
