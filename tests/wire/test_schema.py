"""The protocol's JSON Schema (sessions_app/wire/schema.py,
docs/protocol.schema.json) against protocol.py's parsers and a live
server's frames."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from sessions_app.management.commands.protocol_schema import render
from sessions_app.models import AgentSession
from sessions_app.wire import frames
from sessions_app.wire import protocol as p
from sessions_app.wire.decisions import parse_decide
from sessions_app.wire.schema import document
from tests.harness import ROOT, WsClient
from tests.support.log import finished
from tests.support.waiting import wait_for
from tests.web.test_stream import client_for, post, read_until

SCHEMA = document()
Draft202012Validator.check_schema(SCHEMA)


def validator(side: str) -> Draft202012Validator:
    return Draft202012Validator({**SCHEMA, "$ref": f"#/$defs/{side}"})


CLIENT, SERVER = validator("client"), validator("server")

PARSERS = {
    p.START: p.parse_start,
    p.RESUME: p.parse_resume,
    p.ACK: p.parse_ack,
    p.SEND: p.parse_send,
    p.DECIDE: parse_decide,
    p.CANCEL: p.parse_cancel,
    p.SYNC: p.parse_sync,
    p.SWITCH: p.parse_switch,
    p.PING: lambda f: p.request_id_of(f, strict=True),
    p.VISIBILITY: p.parse_visibility,
}

VALID = [
    {"type": "visibility", "visible": False},
    {"type": "decide", "approval_id": "ap_1", "decision": "answer", "answer": {"name": "Ada"}},
    {"type": "start", "protocol": 1},
    {"type": "start", "protocol": 1, "title": "t", "tab_id": "tab", "features": ["batch"]},
    {"type": "resume", "protocol": 1, "session_id": "s_1", "after": 0},
    {"type": "resume", "protocol": 1, "session_id": "s_1", "after": 5, "epoch": "E"},
    {"type": "ack", "seq": 3},
    {"type": "send", "client_message_id": "m1", "text": "hi", "request_id": 7},
    {"type": "send", "client_message_id": "m1", "text": "hi", "interrupt": True},
    {"type": "send", "client_message_id": "m1", "text": "hi", "edit_of": "run_1"},
    {"type": "send", "client_message_id": "m1", "regenerate": "run_1"},
    {"type": "decide", "approval_id": "ap_1", "decision": "deny"},
    {"type": "cancel", "run_id": "run_1", "request_id": "r"},
    {"type": "sync", "after": 0},
    {"type": "switch", "run_id": "run_1"},
    {"type": "ping"},
]

INVALID = [
    {"type": "visibility", "visible": "no"},
    {"type": "visibility"},
    {"type": "decide", "approval_id": "ap_1", "decision": "answer"},
    {"type": "decide", "approval_id": "ap_1", "decision": "approve", "answer": {}},
    {"type": "start", "protocol": 2},
    {"type": "start", "protocol": 1, "title": "x" * (p.MAX_TITLE_CHARS + 1)},
    {"type": "start", "protocol": 1, "features": ["x"] * (p.MAX_FEATURES + 1)},
    {"type": "ack", "seq": -1},
    {"type": "send", "client_message_id": "m1"},
    {"type": "send", "client_message_id": "m1", "text": "   "},
    {"type": "send", "client_message_id": "", "text": "hi"},
    {"type": "send", "client_message_id": "m1", "text": "hi", "interrupt": "yes"},
    {"type": "send", "client_message_id": "m1", "regenerate": "run_1", "text": "hi"},
    {"type": "send", "client_message_id": "m1", "regenerate": "r" * 41},
    {"type": "decide", "approval_id": "ap_1", "decision": "maybe"},
    {"type": "cancel"},
    {"type": "sync", "after": "0"},
    {"type": "switch", "run_id": ""},
    {"type": "ping", "request_id": ["r"]},
]


def test_the_published_file_is_the_schema_protocol_py_builds():
    """docs/protocol.schema.json is exactly what `manage.py protocol_schema`
    writes now (regenerate it after a protocol change)."""
    published = (ROOT / "docs" / "protocol.schema.json").read_text()
    assert published == render()
    assert json.loads(published) == SCHEMA


def test_every_frame_type_has_a_schema():
    """Each frame type protocol.py names has its schema, on its side."""
    defs = SCHEMA["$defs"]
    client = {k.removeprefix("client.") for k in defs if k.startswith("client.")}
    server = {k.removeprefix("server.") for k in defs if k.startswith("server.")}
    assert client == set(PARSERS)
    types = {
        v for k, v in vars(p).items() if k.isupper() and isinstance(v, str) and k in _FRAME_NAMES
    }
    assert client | server == types


_FRAME_NAMES = {
    *("START", "RESUME", "ACK", "SEND", "DECIDE", "CANCEL", "SYNC", "SWITCH", "PING"),
    "VISIBILITY",
    *("START_OK", "RESUME_OK", "RESUME_REJECTED", "EVENT", "SEND_OK", "DECIDE_OK"),
    *("CANCEL_OK", "SYNC_OK", "SWITCH_OK", "PONG", "PRESENCE", "TITLE", "COMPACTED"),
    *("BATCH", "ERROR"),
}


@pytest.mark.parametrize("frame", VALID, ids=lambda f: f["type"])
def test_a_frame_the_schema_accepts_the_parser_accepts(frame):
    """Every valid example: the schema and protocol.py's parser both take it."""
    assert CLIENT.is_valid(frame), list(CLIENT.iter_errors(frame))
    PARSERS[frame["type"]](frame)


@pytest.mark.parametrize("frame", INVALID, ids=lambda f: f["type"])
def test_a_frame_the_schema_refuses_the_parser_refuses(frame):
    """Every invalid example: both refuse it (the parser with its error)."""
    assert not CLIENT.is_valid(frame)
    with pytest.raises((p.FrameError, p.Rejection)):
        PARSERS[frame["type"]](frame)


@pytest.mark.django_db(transaction=True)
async def test_every_frame_a_live_server_sends_fits_the_schema(server, cookie):
    """A conversation over a real socket (start, send, stream, a gate, a
    decision, a regenerate, a switch, ping, sync, an error, a resume with
    compaction and batches, a rejected resume): every frame received fits
    the server schema, and every kind of frame was seen."""
    c = await WsClient.connect(server.ws, cookie)
    ok = await c.request({"type": "start", "protocol": 1, "features": list(p.FEATURES)})
    sid = ok["session_id"]
    first = await c.request({"type": "send", "client_message_id": "m1", "text": "/stream 5 0"})
    await c.wait_event(lambda f: f["kind"] == "run.finished")
    await c.request({"type": "send", "client_message_id": "m2", "text": "/write s.txt x"})
    asked = await c.wait_event(lambda f: f["kind"] == "approval.requested")
    await c.request(
        {"type": "decide", "approval_id": asked["data"]["approval_id"], "decision": "approve"}
    )
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["seq"] > asked["seq"])
    await c.request({"type": "send", "client_message_id": "m3", "regenerate": first["run_id"]})
    await c.request({"type": "switch", "run_id": first["run_id"]})
    await c.request({"type": "ping"})
    await c.request({"type": "sync", "after": 0})
    await c.request({"type": "cancel", "run_id": first["run_id"]})
    await c.request({"type": "nope"})
    seen = list(c.frames)
    await c.close()
    again = await WsClient.connect(server.ws, cookie)
    await again.resume(sid, 0, features=["compact", "batch"])
    # Sent once the replay is through.
    await again.wait(lambda f: f["type"] == "presence")
    rejected = await WsClient.connect(server.ws, cookie)
    await rejected.request(
        {"type": "resume", "protocol": 1, "session_id": sid, "after": 10**6, "epoch": "x"}
    )
    seen += list(again.frames) + list(rejected.frames)
    await again.close()
    await rejected.close()
    for frame in seen:
        assert SERVER.is_valid(frame), (frame, list(SERVER.iter_errors(frame))[:1])
    kinds = {f["type"] for f in seen}
    assert kinds >= {
        *("start_ok", "resume_ok", "resume_rejected", "event", "send_ok", "decide_ok"),
        *("sync_ok", "switch_ok", "pong", "presence", "title", "error", "batch"),
    }, kinds


def test_every_event_kind_has_its_data_schema():
    """Each kind protocol.py names has ``data.<kind>``, and the event frame
    holds each known kind's data to it."""
    kinds = {v for k, v in vars(p).items() if k.startswith("K_")}
    assert {k.removeprefix("data.") for k in SCHEMA["$defs"] if k.startswith("data.")} == kinds
    bad = {"type": "event", "session_id": "s_1", "seq": 2, "kind": p.K_RUN_FINISHED}
    bad |= {"run_id": "run_1", "ts": "2026-01-01T00:00:00Z", "data": {"stop_reason": "nope"}}
    assert not SERVER.is_valid(bad)
    assert SERVER.is_valid({**bad, "data": {"stop_reason": p.STOP_END_TURN}})
    assert SERVER.is_valid({**bad, "kind": "some.future_kind"}), "an unknown kind: any data"


def test_the_wire_copies_of_other_stages_constants_agree():
    """The schema's copies of what the wire may not import (the list's
    statuses and length, a tool card's display kinds) equal the originals."""
    from sessions_app.log.sessions import MAX_LISTED
    from sessions_app.models import AgentSession
    from sessions_app.runtime.registry import DISPLAY_AS
    from sessions_app.wire import schema_data

    assert schema_data.MAX_LISTED == MAX_LISTED
    assert schema_data.DISPLAY_AS == DISPLAY_AS
    assert list(schema_data.STATUSES) == list(AgentSession.Status.values)
    assert list(schema_data.STATUS_LABELS) == list(AgentSession.Status.labels)


@pytest.mark.django_db(transaction=True)
async def test_the_list_sockets_frames_fit_the_schema(server, cookie):
    """The list socket's frames (the list, a session's change, pong, an error,
    and a removal as the socket builds it) fit ``list.server``; what a client
    sends, ``list.client``."""
    listing = validator("list.server")
    c = await WsClient.connect(server.ws.replace("/ws/sessions/", "/ws/list/"), cookie)
    await c.wait(lambda f: f["type"] == p.LIST_SESSIONS)
    tab = await WsClient.connect(server.ws, cookie)
    sid = (await tab.start(title="listed"))["session_id"]
    await c.wait(lambda f: f["type"] == p.LIST_SESSION and f["session"]["id"] == sid)
    await tab.close()
    ping = {"type": "ping", "request_id": "r1"}
    assert validator("list.client").is_valid(ping)
    await c.request(ping)
    await c.request({"type": "nope"})
    # A deletion's frame, as the socket builds it (a live one needs the admin,
    # whose log the suite's flushes between tests can leave without its
    # content types in a running server).
    gone = frames.session_gone(sid)
    for frame in [*c.frames, gone]:
        assert listing.is_valid(frame), (frame, list(listing.iter_errors(frame))[:1])
    assert {f["type"] for f in c.frames} >= {"sessions", "session", "pong", "error"}
    await c.close()


@pytest.mark.django_db(transaction=True)
def test_the_sse_streams_own_events_fit_the_schema(server, user):
    """The SSE stream's opening ``stream`` event, a ``compacted`` one and the
    terminal ``reset`` fit ``sse.<event>``; its logged events, the server's
    ``event`` frame."""
    from httpx_sse import connect_sse

    from sessions_app.log.sessions import create_session

    sid = create_session(user, "sse").id
    with client_for(server, user) as c:
        sent = post(c, sid, "m1", "/stream 3 0")
        wait_for(lambda: finished(sent["run_id"]))
        head = AgentSession.objects.get(id=sid).head
        with connect_sse(c, "GET", f"/api/sessions/{sid}/stream/?after=0&compact=1") as source:
            got = read_until(source.iter_sse(), lambda e: e.id == str(head))
        with connect_sse(c, "GET", f"/api/sessions/{sid}/stream/?after={head + 5}") as source:
            got += read_until(source.iter_sse(), lambda e: e.event == "reset")
    names = {e.event for e in got}
    assert {"stream", "compacted", "reset"} <= names, names
    for sse in got:
        data = json.loads(sse.data)
        schema = validator(f"sse.{sse.event}") if f"sse.{sse.event}" in SCHEMA["$defs"] else SERVER
        assert schema.is_valid(data), (sse.event, data, list(schema.iter_errors(data))[:1])
