"""`log.format=json` for the programs built on gregor-client (gregor-broker, gregor-mirror):
one JSON object per log line, for log shippers."""

from __future__ import annotations

import json
import logging


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def log_json() -> None:
    """Every handler of the root logger writes JSON lines from now on."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonFormatter())
