"""Log output: plain lines for people (the default) or JSON lines for collectors
(RAGD_LOG_FORMAT=json), one object per record."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from services.common.config import Env
from services.common.tracing import trace_id

FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """{"time", "level", "service", "logger", "message"} and, when there is one, the
    "trace_id" of the request being served and the "exception"."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        current = trace_id()
        if current:
            entry["trace_id"] = current
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(
    level: str = "INFO", service: str = "ragd", environ: Mapping[str, str] | None = None
) -> None:
    """Raises SystemExit naming the variable when RAGD_LOG_FORMAT is neither."""
    log_format = Env(environ).str("LOG_FORMAT", "text").lower()
    if log_format not in FORMATS:
        raise SystemExit(
            f"ragd-{service}: RAGD_LOG_FORMAT must be text or json, got {log_format!r}"
        )
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter(service))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
