"""gregor-etl's own lines: `gregor-etl: ...` text (errors on stderr), or JSON objects."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gregor.spark.etl import log, parse_args, set_up_logging

ARGS = ["--bootstrap-servers", "b:9092", "--topics", "t", "--warehouse", "/w"]


@pytest.fixture(autouse=True)
def fresh_logger() -> Iterator[None]:
    yield
    for handler in list(log.handlers):
        log.removeHandler(handler)


def test_text_lines_go_to_stdout_and_errors_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    set_up_logging(parse_args(ARGS).log_format)
    log.info("t: 10 records loaded this run, lag 0, table /w/t")
    log.error("t failed: boom; starting over in 5.0 s")
    out, err = capsys.readouterr()
    assert out == "gregor-etl: t: 10 records loaded this run, lag 0, table /w/t\n"
    assert err == "gregor-etl: t failed: boom; starting over in 5.0 s\n"


def test_json_lines_are_one_object_each(capsys: pytest.CaptureFixture[str]) -> None:
    set_up_logging(parse_args([*ARGS, "--log-format", "json"]).log_format)
    log.info("done in 1.5 s")
    log.error("failed: q: boom")
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(e["level"], e["logger"], e["message"]) for e in lines] == [
        ("INFO", "gregor.etl", "done in 1.5 s"),
        ("ERROR", "gregor.etl", "failed: q: boom"),
    ]
    assert err == ""


def test_an_unknown_log_format_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*ARGS, "--log-format", "xml"])
    assert "invalid choice: 'xml'" in capsys.readouterr().err
