"""logs.py: JSON lines with each socket's context, from a real daphne."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from sessions_app.server.logs import JsonFormatter, Outage, SocketLog
from tests.harness import Daphne, WsClient

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_record_becomes_one_json_line_with_its_context():
    """Message, level, logger, the context fields present, and the traceback."""
    record = logging.LogRecord("sessions_app.x", logging.WARNING, __file__, 1, "a %s", ("b",), None)
    record.connection_id, record.close_code = "c_1", 4400
    out = json.loads(JsonFormatter().format(record))
    assert (
        out["message"] == "a b" and out["level"] == "WARNING" and out["logger"] == "sessions_app.x"
    )
    assert (out["connection_id"], out["close_code"]) == ("c_1", 4400) and "session_id" not in out
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(JsonFormatter().format(record))["exc"]


def test_an_outage_is_one_line_for_many_with_a_count(caplog):
    """Alike failures within ``every`` seconds are one line; the next says
    how many it left unwritten; no traceback for any."""
    from django.db import OperationalError

    outage = Outage(logging.getLogger("tests.outage"), every=10)
    with caplog.at_level(logging.ERROR, "tests.outage"):
        for now in range(5):
            outage.error("a sweep", OperationalError("gone"), float(now))
        outage.error("a sweep", OperationalError("gone"), 11.0)
    assert [r.getMessage() for r in caplog.records] == [
        "a sweep failed: OperationalError('gone')",
        "a sweep failed: OperationalError('gone') (4 more since the last line)",
    ]
    assert all(r.exc_info is None for r in caplog.records)


@pytest.mark.parametrize(
    "error, outage",
    [
        ("django.db.OperationalError", True),
        ("django.db.InterfaceError", True),
        ("redis.exceptions.ConnectionError", True),
        ("builtins.ConnectionRefusedError", True),
        ("builtins.TimeoutError", True),
        ("django.db.DataError", False),  # a NUL in text: a bug, not an outage
        ("django.db.IntegrityError", False),
        ("builtins.PermissionError", False),  # a workspace it may not write
        ("builtins.ValueError", False),
    ],
)
def test_only_a_service_out_of_reach_is_an_outage(error, outage):
    """An outage is a service out of reach (its connection refused, lost or
    timed out); a database error the data or the code made, or a disk the
    process may not write, is not: it keeps its traceback and its run ends."""
    import importlib

    from sessions_app.server.logs import is_outage

    module, name = error.rsplit(".", 1)
    assert is_outage(getattr(importlib.import_module(module), name)("x")) is outage


def test_failed_keeps_the_traceback_of_what_is_not_an_outage(caplog):
    """``failed``: a database or network error is an outage's one line; a
    bug (a ValueError) is logged each time, with its traceback."""
    from django.db import OperationalError

    outage = Outage(logging.getLogger("tests.failed"))
    with caplog.at_level(logging.ERROR, "tests.failed"):
        for _ in range(3):
            outage.failed("a sweep", OperationalError("gone"), connection_id="c_1")
            outage.failed("a sweep", ValueError("a bug"))
    outages = [r for r in caplog.records if r.exc_info is None]
    bugs = [r for r in caplog.records if r.exc_info is not None]
    assert [r.getMessage() for r in outages] == ["a sweep failed: OperationalError('gone')"]
    assert outages[0].connection_id == "c_1"
    assert len(bugs) == 3 and all(r.exc_info[0] is ValueError for r in bugs)


def test_socket_log_adds_the_context_at_each_line(caplog):
    """The adapter reads the socket's fields when the line is written."""

    class Socket:
        connection_id, session_id, first_frame, close_code = "c_2", None, None, None

    sock = Socket()
    logger = SocketLog(logging.getLogger("sessions_app.test"), sock)
    with caplog.at_level(logging.INFO, logger="sessions_app.test"):
        logger.info("one")
        sock.session_id, sock.first_frame, sock.close_code = "s_1", "resume", 1000
        logger.info("two")
    one, two = caplog.records
    assert (one.connection_id, one.session_id) == ("c_2", None)
    assert (two.session_id, two.first_frame, two.close_code) == ("s_1", "resume", 1000)


async def test_a_daphne_with_log_format_json_logs_sockets_with_their_context(
    tmp_path, user, cookie
):
    """LOG_FORMAT=json: the line of a 4400 close carries the connection id, the
    first frame and the close code, as JSON."""
    server = Daphne(tmp_path, LOG_FORMAT="json").start()
    try:
        c = await WsClient.connect(server.ws, cookie)
        await c.send({"type": "ping"})
        assert await c.wait_closed() == 4400
    finally:
        server.stop()
    lines = []
    for path in tmp_path.glob("*.log"):
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                lines.append(json.loads(line))
    closed = [x for x in lines if x.get("close_code") == 4400 and "closed" in x["message"]]
    assert closed, lines[-5:]
    assert closed[0]["first_frame"] == "ping" and closed[0]["connection_id"].startswith("c_")
