"""The C twins are used only where they are safe: CPython in SUPPORTED_CPYTHON, with the
GIL. Elsewhere (PyPy, free-threaded builds, other CPython versions) the references are
chosen, with a warning; GREGOR_NO_EXTENSIONS=1 chooses them quietly."""

from __future__ import annotations

import logging
import sys
import types
from collections import namedtuple
from collections.abc import Iterator

import pytest

from gregor.protocol import native

VersionInfo = namedtuple("VersionInfo", "major minor micro releaselevel serial")


@pytest.fixture(autouse=True)
def fresh_decision() -> Iterator[None]:
    native._interpreter_allows.cache_clear()
    yield
    native._interpreter_allows.cache_clear()


def implementation(name: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**vars(sys.implementation), "name": name})


def test_this_interpreter_is_judged_by_its_implementation_version_and_gil() -> None:
    first, last = native.SUPPORTED_CPYTHON
    supported = (
        sys.implementation.name == "cpython"
        and first <= sys.version_info[:2] <= last
        and getattr(sys, "_is_gil_enabled", lambda: True)()
    )
    assert (native.unsupported_interpreter() is None) == supported


@pytest.mark.parametrize(
    ("attribute", "value", "reason"),
    [
        ("implementation", implementation("pypy"), "pypy is not CPython"),
        ("version_info", VersionInfo(3, 10, 14, "final", 0), "CPython 3.10 is not 3.11 to 3.13"),
        ("version_info", VersionInfo(3, 14, 0, "final", 0), "CPython 3.14 is not 3.11 to 3.13"),
        ("_is_gil_enabled", lambda: False, "this free-threaded CPython runs without the GIL"),
    ],
)
def test_another_interpreter_gets_the_references(
    attribute: str,
    value: object,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("GREGOR_NO_EXTENSIONS", raising=False)
    monkeypatch.setattr(sys, attribute, value, raising=False)
    assert native.unsupported_interpreter() == reason
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert native.native_function("crc32c") is None
        assert not native.native_available()
    assert [r.getMessage() for r in caplog.records] == [
        f"Gregor's C extensions are not used ({reason}): pure-Python code instead"
    ]


def test_a_free_threaded_build_with_the_gil_on_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    assert native.unsupported_interpreter() is None


def test_no_extensions_is_quiet(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GREGOR_NO_EXTENSIONS", "1")
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.native_function("crc32c") is None
    assert caplog.records == []
