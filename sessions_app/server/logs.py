"""Logging for operators: JSON lines when configured, and the socket context.

``LOG_FORMAT=json`` makes the ``sessions_app`` loggers write one JSON object
per line (``ts``, ``level``, ``logger``, ``message``, ``exc`` when there is a
traceback, and the context fields below when a line has them). Every line
the socket consumer writes carries its socket's ``connection_id``,
``session_id``, ``first_frame`` and, once it closed, ``close_code``
(``SocketLog``); the run executor's lines carry ``run_id``; the access
log's (``server.access_log``) its fields; and, with tracing on, every line
written inside a span its ``trace_id`` and ``span_id``. Plain text remains
the default.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from sessions_app.server import tracing

CONTEXT_FIELDS = ("connection_id", "session_id", "run_id", "first_frame", "close_code", "tab_id")


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        access = getattr(record, "access", None)
        if access:
            out.update(access)
        ids = tracing.current_ids()
        if ids is not None:
            out["trace_id"], out["span_id"] = ids
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class SocketLog(logging.LoggerAdapter):
    """A logger whose every line carries a socket's context (read when the line
    is written, so it follows the socket through its handshake and close)."""

    def __init__(self, logger: logging.Logger, socket: Any):
        super().__init__(logger, {})
        self.socket = socket

    def process(self, msg, kwargs):
        s = self.socket
        context = {
            "connection_id": getattr(s, "connection_id", None),
            "session_id": getattr(s, "session_id", None),
            "first_frame": getattr(s, "first_frame", None),
            "close_code": getattr(s, "close_code", None),
        }
        kwargs["extra"] = {**context, **kwargs.get("extra", {})}
        return msg, kwargs


def is_outage(exc: BaseException) -> bool:
    """Did a service the process depends on fail (the database or Redis
    unreachable, a connection lost or timed out), rather than this code? An
    outage is logged as one line for many (``Outage``), and a run it stopped
    goes on from its last checkpoint (``runtime.executor``); anything else (an
    integrity or data error, a full disk, a bug) keeps its traceback."""
    from django.db import InterfaceError, OperationalError

    if isinstance(exc, ConnectionError | TimeoutError | OperationalError | InterfaceError):
        return True
    try:
        from redis import exceptions as redis_errors
    except ImportError:  # pragma: no cover - channels-redis brings it
        redis_errors = None
    if redis_errors and isinstance(exc, redis_errors.ConnectionError | redis_errors.TimeoutError):
        return True
    try:
        import psycopg
    except ImportError:  # the embedded profile may run without it
        return False
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


class Outage:
    """One line for many alike: an error that every socket or message meets
    at once in an outage (a Redis host gone) is written the first time, then
    at most once every ``every`` seconds, with how many were left unwritten
    since, never a traceback a message."""

    def __init__(self, logger: logging.Logger, every: float = 10.0) -> None:
        self.logger, self.every = logger, every
        self.last: dict[str, float] = {}
        self.unwritten: dict[str, int] = {}

    def error(self, what: str, exc: BaseException, now: float, **extra: Any) -> None:
        """``what`` failed with ``exc`` (``now``: a monotonic time)."""
        if now - self.last.get(what, float("-inf")) < self.every:
            self.unwritten[what] = self.unwritten.get(what, 0) + 1
            return
        self.last[what] = now
        more = self.unwritten.pop(what, 0)
        also = f" ({more} more since the last line)" if more else ""
        self.logger.error("%s failed: %r%s", what, exc, also, extra=extra)

    def failed(self, what: str, exc: BaseException, **extra: Any) -> None:
        """``what`` failed with ``exc``: one line for many when it is an
        outage (``is_outage``), else the error with its traceback."""
        if is_outage(exc):
            self.error(what, exc, time.monotonic(), **extra)
        else:
            self.logger.error("%s failed", what, exc_info=exc, extra=extra)
