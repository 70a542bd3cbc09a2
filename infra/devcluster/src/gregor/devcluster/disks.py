"""Small disks for the brokers' log directories, to fill up as a fault: a tmpfs of a few
megabytes mounted on a broker's data folder before it first starts (needs root).

`fill` writes a filler file until the disk has no free page left; the broker's next write
that needs one fails with ENOSPC (or, on an index page it maps, SIGBUS). `free` removes the
filler. `unmount_under` removes every such disk under a folder: `down` calls it once the
processes are stopped, also after a crash of the harness.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

FILLER = ".disk-full"
_CHUNKS = (1 << 20, 4096)  # write megabytes while they fit, then pages


def mount(path: Path, megabytes: int) -> None:
    """A tmpfs of `megabytes` on `path` (created if missing), unless one is there already."""
    path.mkdir(parents=True, exist_ok=True)
    if path.absolute() in mounts_under(path):
        return
    options = f"size={megabytes}m,mode=0755"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "gregor-disk", str(path)], check=True)


def mounts_under(directory: Path) -> list[Path]:
    """The mount points at or under `directory`, deepest first."""
    top = directory.absolute()
    found: list[Path] = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        # Spaces and the like in a mount point are octal escapes (\040).
        point = Path(line.split()[1].encode().decode("unicode_escape"))
        if point == top or top in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_under(directory: Path) -> list[Path]:
    """Unmount every disk at or under `directory` (lazily if still busy); the ones unmounted."""
    points = mounts_under(directory)
    for point in points:
        if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], check=True)
    return points


def fill(path: Path) -> int:
    """Fill the disk holding `path` up with a filler file; the bytes it took."""
    written = 0
    fd = os.open(path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in _CHUNKS:
            block = b"\0" * size
            while True:
                try:
                    written += os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written


def free(path: Path) -> None:
    """Remove the filler: the disk has room again."""
    (path / FILLER).unlink(missing_ok=True)
