"""The access log (sessions_app/server/access_log.py) and JSON lines with
trace ids (logs.py): a real daphne run as the runbook's unit runs it
(LOG_FORMAT=json, daphne's own access log off), every line of its output
JSON, the client named by the trusted proxy's X-Forwarded-For."""

from __future__ import annotations

import json
import logging
import re

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from sessions_app.server import tracing
from sessions_app.server.access_log import client_address
from sessions_app.server.logs import JsonFormatter
from tests.harness import Daphne, Worker, WsClient

pytestmark = pytest.mark.django_db(transaction=True)


def json_lines(log_dir) -> list[dict]:
    """Every line the processes wrote, each parsed as JSON (or this fails)."""
    return [
        json.loads(line)
        for path in log_dir.glob("*.log")
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def test_the_client_is_what_a_trusted_proxy_forwards_and_else_the_peer(settings):
    """nginx on this host (a trusted proxy) names the client; anyone else
    naming one is not believed."""
    settings.AGENT_TRUSTED_PROXIES = ["127.0.0.1"]
    forwarded = [(b"x-forwarded-for", b"198.51.100.9, 203.0.113.7")]
    assert client_address({"client": ("127.0.0.1", 5), "headers": forwarded}) == "203.0.113.7"
    assert client_address({"client": ("192.0.2.1", 5), "headers": forwarded}) == "192.0.2.1"
    assert client_address({"client": ("127.0.0.1", 5), "headers": []}) == "127.0.0.1"
    assert client_address({"client": None, "headers": forwarded}) == ""
    settings.AGENT_TRUSTED_PROXIES = ["10.0.0.0/8", "[::1]", "not an address"]
    assert client_address({"client": ("10.1.2.3", 5), "headers": forwarded}) == "203.0.113.7"
    assert client_address({"client": ("::1", 5), "headers": forwarded}) == "203.0.113.7"
    assert client_address({"client": ("127.0.0.1", 5), "headers": forwarded}) == "127.0.0.1"


def test_a_line_written_inside_a_span_carries_its_trace_and_span_ids():
    """With tracing on, JSON lines name the trace and span they were written in."""
    tracing.use_provider(TracerProvider())
    try:
        record = logging.LogRecord("sessions_app.x", logging.INFO, __file__, 1, "in", (), None)
        with tracing.span("work") as span:
            inside = json.loads(JsonFormatter().format(record))
            context = span.get_span_context()
        outside = json.loads(JsonFormatter().format(record))
    finally:
        tracing.use_provider(None)
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")
    assert "trace_id" not in outside


async def test_every_line_of_a_json_daphne_is_json_with_the_forwarded_client(
    tmp_path, user, cookie
):
    """LOG_FORMAT=json and --verbosity 0: an HTTP request behind the proxy
    has its access line (the client nginx forwarded, the status), a socket
    its opened and ended lines (its own line the close code), as they
    happen; not one line of the server's output is plain text."""
    server = Daphne(tmp_path, LOG_FORMAT="json", args=("--verbosity", "0")).start()
    try:
        async with httpx.AsyncClient(base_url=server.http, timeout=10) as http:
            answer = await http.get("/healthz", headers={"X-Forwarded-For": "203.0.113.7"})
        assert answer.status_code == 200
        c = await WsClient.connect(server.ws, cookie)
        await c.send({"type": "ping"})
        assert await c.wait_closed() == 4400
        server.wait_for_log(re.compile("websocket ended"))
    finally:
        server.stop()
    parsed = json_lines(tmp_path)
    access = [x for x in parsed if x["logger"] == "sessions_app.access"]
    forwarded = [x for x in access if x["client"] == "203.0.113.7"]
    assert [(x["method"], x["path"], x["status"]) for x in forwarded] == [("GET", "/healthz", 200)]
    sockets = [x["message"].split()[1] for x in access if x["path"].startswith("/ws/")]
    assert sockets == ["opened", "ended"]
    closed = [x for x in parsed if x.get("close_code") == 4400]  # the socket's own line
    assert closed and closed[0]["first_frame"] == "ping"
    # One id from the socket's access lines to its own.
    ids = {x["connection_id"] for x in access if x["path"].startswith("/ws/")}
    assert ids == {closed[0]["connection_id"]}


def test_every_line_of_a_json_run_worker_is_json(tmp_path, settings):
    """A run worker under LOG_FORMAT=json: its start-up and stop lines, as
    every other, are JSON objects (the production profile runs workers)."""
    if settings.AGENT_RUNNER != "worker":
        pytest.skip("run workers are the production profile's: it runs this")
    worker = Worker(tmp_path, LOG_FORMAT="json").start()
    worker.stop()
    parsed = json_lines(tmp_path)
    said = [x["message"] for x in parsed if x["logger"] == "sessions_app.worker"]
    assert any(m.startswith("run worker ") and " started " in m for m in said), said
    assert any(" stopped; handed over: " in m for m in said), said


async def test_a_response_the_app_failed_is_500_and_one_the_client_left_499(caplog):
    """No response start: the app raised (daphne answers 500), or the client
    left first (499); either way the line is written, with a status."""
    import asyncio

    from sessions_app.server.access_log import AccessLog

    async def failing(scope, receive, send):
        raise RuntimeError("boom")

    async def abandoned(scope, receive, send):
        raise asyncio.CancelledError

    scope = {"type": "http", "method": "GET", "path": "/x", "client": ("192.0.2.5", 1)}
    with caplog.at_level(logging.INFO, logger="sessions_app.access"):
        with pytest.raises(RuntimeError):
            await AccessLog(failing)(scope, None, None)
        with pytest.raises(asyncio.CancelledError):
            await AccessLog(abandoned)(scope, None, None)
    lines = [r for r in caplog.records if r.name == "sessions_app.access"]
    assert [r.access["status"] for r in lines] == [500, 499]


async def test_an_application_error_names_its_connection_and_daphne_says_it_once(caplog):
    """The app failed on a connection: one error line with the connection's
    id (the one its access line and its socket's lines carry), the method
    and the path, and its traceback; daphne's own "Exception inside
    application" line for it, which names none of them, is dropped."""
    from sessions_app.server.access_log import AccessLog, DaphneDuplicate

    seen = {}

    async def failing(scope, receive, send):
        seen["id"] = scope["connection_id"]
        raise RuntimeError("boom")

    scope = {"type": "websocket", "path": "/ws/sessions/", "client": ("192.0.2.5", 1)}
    with caplog.at_level(logging.INFO), pytest.raises(RuntimeError) as raised:
        await AccessLog(failing)(scope, None, None)
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert error.getMessage() == f"connection {seen['id']}: WS /ws/sessions/ failed"
    assert error.connection_id == seen["id"] and error.exc_info[1] is raised.value
    access = [r for r in caplog.records if r.name == "sessions_app.access"]
    assert {r.connection_id for r in access} == {seen["id"]}
    daphnes = logging.makeLogRecord(
        {"name": "daphne.server", "msg": "Exception inside application: %s", "args": ("boom",)}
    )
    daphnes.exc_info = (RuntimeError, raised.value, None)
    assert not DaphneDuplicate().filter(daphnes)
    daphnes.exc_info = (RuntimeError, RuntimeError("another"), None)
    assert DaphneDuplicate().filter(daphnes)


async def test_a_path_with_a_line_break_cannot_forge_a_plain_line(caplog):
    """A decoded path holding a line break (``%0a``) and a forged line after
    it: the plain line is one line, its control characters escaped; the
    JSON fields keep the path as it came."""
    from sessions_app.server.access_log import AccessLog

    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def sent(message):
        pass

    forged = "/x\n2026-12-07 04:00:00 INFO sessions_app.access http 10.9.9.9 GET /admin/ 200\u2028"
    scope = {"type": "http", "method": "GET", "path": forged, "client": ("192.0.2.5", 1)}
    with caplog.at_level(logging.INFO, logger="sessions_app.access"):
        await AccessLog(ok)(scope, None, sent)
    (record,) = caplog.records
    message = record.getMessage()
    assert "\n" not in message and "\u2028" not in message
    assert message.startswith("http 192.0.2.5 GET /x\\x0a2026-12-07 04:00:00 INFO ")
    assert record.access["path"] == forged
