"""One log line per request, as text or JSON, and the request id that ties it to the response.

The line names the route template (``/v1/memories/{memory_id}``), never the path, the query or the
caller: no user id, key or memory id reaches the log through it.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
REQUEST_ID_HEADER = "X-Request-ID"
# An id a proxy or client sent is kept when it is short and plain (a UUID, a trace id); anything else
# (a log-injection attempt, a megabyte) is replaced by one of ours.
_SANE_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
request_log = logging.getLogger("engram.request")


def request_id(sent: str | None) -> str:
    """The incoming id when it is sane, else a new one (32 hex digits)."""
    return sent if sent is not None and _SANE_ID.fullmatch(sent) else uuid.uuid4().hex


def log_request(method: str, route: str, status: int, seconds: float, rid: str) -> None:
    """Log the request at INFO (so --log-level warning leaves it out, as uvicorn's access log was)."""
    if request_log.isEnabledFor(logging.INFO):
        fields = {
            "method": method,
            "route": route,
            "status": status,
            "duration_ms": round(seconds * 1000, 2),
            "request_id": rid,
        }
        request_log.info(
            "%s %s %d %.1f ms request_id=%s",
            method,
            route,
            status,
            seconds * 1000,
            rid,
            extra={"fields": fields},
        )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and a request line's own fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(event="request", **fields)
        else:
            line["message"] = record.getMessage()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def log_config(level: str, log_format: LogFormat) -> dict[str, Any]:
    """uvicorn's ``log_config`` for `engram serve`: its own logs and Engram's (the request lines among
    them) on stderr, in one format. uvicorn's access log is left off: the request line replaces it."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"}
        if log_format == "json"
        else {
            "()": "uvicorn.logging.DefaultFormatter",
            "fmt": "%(levelprefix)s %(message)s",
            "use_colors": None,
        }
    )
    handler = {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"}
    upper = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {"default": handler},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": upper, "propagate": False},
            "uvicorn.error": {"level": upper},
            "engram": {"handlers": ["default"], "level": upper, "propagate": False},
        },
    }
