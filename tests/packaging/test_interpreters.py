"""On an interpreter the C twins do not support, every package takes its pure-Python
reference at import: simulated in a fresh process by changing what gregor.protocol.native
reads (sys.implementation, sys.version_info, sys._is_gil_enabled) before any Gregor import
(after the third-party ones, which read them too)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PATCHES = {
    "pypy": "sys.implementation = types.SimpleNamespace(**{**vars(sys.implementation), 'name': 'pypy'})",  # noqa: E501
    "free-threaded": "sys._is_gil_enabled = lambda: False",
    "cpython-3.14": "sys.version_info = Version(3, 14, 0, 'final', 0)",
}

# Which implementation each module with a C twin chose: "C" or "reference".
CHOICES = textwrap.dedent(
    """
    from gregor.client.producer import accumulator, core
    from gregor.protocol import checksums, hashing, records
    from gregor.storage import fast_append
    from gregor.storage.segment import LogSegment

    chosen = {
        "records": records._decode_records is not records._decode_records_py,
        "crc32c": checksums.crc32c is not checksums.crc32c_reference,
        "murmur2": hashing.murmur2 is not hashing._murmur2_py,
        "accumulator": accumulator._native_append is not None,
        "producer core": core._native_append_record is not None,
        "storage append": fast_append.segment_fast_append is not LogSegment.fast_append,
    }
    print(sorted(name for name, native in chosen.items() if native))
    """
)


def choices(patch: str = "") -> str:
    preamble = "import collections, sys, types, attrs, trio, crc32c\n"
    preamble += "Version = collections.namedtuple('V', 'major minor micro releaselevel serial')\n"
    done = subprocess.run(
        [sys.executable, "-c", preamble + patch + "\n" + CHOICES],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "GREGOR_NO_EXTENSIONS"},
    )
    return done.stdout.strip() + "\n" + done.stderr


def test_this_interpreter_takes_every_c_twin() -> None:
    assert choices().startswith(
        "['accumulator', 'crc32c', 'murmur2', 'producer core', 'records', 'storage append']"
    )


@pytest.mark.parametrize("interpreter", sorted(PATCHES))
def test_an_unsupported_interpreter_takes_every_reference(interpreter: str) -> None:
    output = choices(PATCHES[interpreter])
    assert output.startswith("[]\n")
    assert "Gregor's C extensions are not used" in output
