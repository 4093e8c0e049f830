"""The access log: a line per HTTP response and per WebSocket, through
logging (``sessions_app.access``), so that under ``LOG_FORMAT=json`` it is
JSON like every other line, and written (flushed) as it happens.

Each line carries the client's address: the peer's, or, when the peer is a
proxy of ``AGENT_TRUSTED_PROXIES`` (addresses or CIDR ranges; nginx on this
host by default), the last address of its ``X-Forwarded-For``. An HTTP line
is written when its response ends (``status``, ``bytes``, ``ms``; 500 when
the app failed and daphne answered, 499 when the client left first); a WebSocket has a line when
it opens and one when it ends (``ms``), and the socket's own lines its
answer and close code (``server.logs``). The lines written inside a traced
action (a send, a run, a decision: ``server.tracing``) carry its trace and
span ids; an access line is written outside them.

Each HTTP request and each socket gets a ``connection_id`` in its scope
(the socket's own lines carry it), and an application error is logged here
with it, the method and the path (daphne's own "Exception inside
application" line, which has none of them, is dropped for it).

daphne writes an access log of its own (plain text on stdout, which a
service manager's pipe holds back until exit): the runbook's units turn it
off (``--verbosity 0``); ``AGENT_ACCESS_LOG=0`` turns this one off.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import re
import secrets
import time
from typing import Any

from django.conf import settings

log = logging.getLogger("sessions_app.access")
errors = logging.getLogger("sessions_app.server.errors")


@functools.cache
def _networks(entries: tuple[str, ...]) -> tuple:
    """``AGENT_TRUSTED_PROXIES`` as networks: addresses or CIDR ranges, with
    or without brackets (``[::1]``); an entry that is neither is ignored."""
    out = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip().strip("[]"), strict=False))
        except ValueError:
            continue
    return tuple(out)


def _trusted(peer: str) -> bool:
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in net for net in _networks(tuple(settings.AGENT_TRUSTED_PROXIES)))


def client_address(scope: dict[str, Any]) -> str:
    """The client's address: the peer, or what a trusted proxy forwarded."""
    peer = (scope.get("client") or ("", 0))[0] or ""
    if _trusted(peer):
        for name, value in scope.get("headers") or ():
            if name == b"x-forwarded-for":
                forwarded = value.decode("latin-1").rsplit(",", 1)[-1].strip()
                if forwarded:
                    return forwarded
    return peer


class AccessLog:
    """ASGI middleware: the access log's lines (see the module's comment)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        scope = {**scope, "connection_id": new_connection_id()}
        try:
            if settings.AGENT_ACCESS_LOG:
                await self._logged(scope, receive, send)
            else:
                await self.app(scope, receive, send)
        except Exception as exc:
            failed(scope, exc)
            raise

    async def _logged(self, scope, receive, send):
        kind = scope["type"]
        started = time.monotonic()
        line: dict[str, Any] = {
            "client": client_address(scope),
            "method": scope.get("method", "WS"),
            "path": scope.get("path", ""),
        }
        if kind == "websocket":
            # A socket's own lines say how it was answered and closed (its
            # close code, a refusal's reason): nothing sits in its send
            # path here, which every event to every tab takes.
            _write("websocket opened", line, started, scope["connection_id"])
            try:
                await self.app(scope, receive, send)
            finally:
                _write("websocket ended", line, started, scope["connection_id"])
            return
        line["status"], line["bytes"] = None, 0

        async def sending(message):
            if message["type"] == "http.response.start":
                line["status"] = message["status"]
            elif message["type"] == "http.response.body":
                line["bytes"] += len(message.get("body") or b"")
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            line["status"] = line["status"] or 499  # the client left first
            raise
        except BaseException:
            line["status"] = line["status"] or 500  # daphne answers it
            raise
        finally:
            line["status"] = line["status"] or 499
            _write("http", line, started, scope["connection_id"])


# What a plain line never holds as it is: control characters (a line break
# would start a line of the client's making), the Unicode line breaks, and
# the backslash that escapes them.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\\\\]")


def plain(value: Any) -> str:
    """``value`` as one field of a plain-text line: ``\\xNN`` (``\\uNNNN``) for
    each unsafe character."""
    return _UNSAFE.sub(_escaped, str(value))


def _escaped(found: re.Match) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _write(what: str, line: dict[str, Any], started: float, connection_id: str) -> None:
    fields = {**line, "ms": round((time.monotonic() - started) * 1000, 1)}
    shown = " ".join(plain(v) for v in fields.values())
    log.info("%s %s", what, shown, extra={"access": fields, "connection_id": connection_id})


def new_connection_id() -> str:
    return "c_" + secrets.token_urlsafe(12)


def failed(scope: dict[str, Any], exc: BaseException) -> None:
    """The application failed on this connection: the error with its id,
    method and path; daphne's own line for it is dropped (``DaphneDuplicate``)."""
    cid = scope.get("connection_id")
    method, path = scope.get("method", "WS"), plain(scope.get("path", ""))[:200]
    errors.error(
        "connection %s: %s %s failed", cid, method, path, exc_info=exc, extra={"connection_id": cid}
    )
    with contextlib.suppress(AttributeError, TypeError):
        exc.agent_logged = True  # type: ignore[attr-defined]


class DaphneDuplicate(logging.Filter):
    """On daphne's logger: drops its "Exception inside application" line for
    an error ``failed`` has logged already, with the connection's id."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not getattr(exc, "agent_logged", False)


def drop_daphnes_duplicates() -> None:
    daphne = logging.getLogger("daphne.server")
    if not any(isinstance(f, DaphneDuplicate) for f in daphne.filters):
        daphne.addFilter(DaphneDuplicate())
