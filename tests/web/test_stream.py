"""The SSE stream (sessions_app/web/stream.py), read by clients nobody here
wrote: the ``httpx-sse`` library from PyPI and ``curl -N``, against a real
daphne. (``EventSource`` in Chromium, through a kill -9: tests/browser/test_stream.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import httpx
import pytest
from httpx_sse import connect_sse

from sessions_app.log.events import read_events
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession
from sessions_app.wire.frames import event_frame
from tests.harness import api_key
from tests.support.log import finished
from tests.support.waiting import poll_pause, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def client_for(server, user) -> httpx.Client:
    return httpx.Client(
        base_url=server.http, headers={"Authorization": f"Token {api_key(user)}"}, timeout=30
    )


def post(c: httpx.Client, session_id: str, cmid: str, text: str) -> dict:
    r = c.post(
        f"/api/sessions/{session_id}/messages/", json={"client_message_id": cmid, "text": text}
    )
    assert r.status_code == 201, r.text
    return r.json()


def read_until(events, stop) -> list:
    """SSE events from ``events`` until (and with) the first ``stop`` accepts."""
    got = []
    for sse in events:
        got.append(sse)
        if stop(sse):
            return got
    raise AssertionError(f"the stream ended after {[e.event for e in got]}")


def test_replay_then_live_with_no_gap_and_no_repeat(server, user):
    """Opened after seq 2 of a finished run, the stream replays the rest of the
    log, then goes live for a run started while it is open: ids are exactly
    3..head, each event is ``event: <kind>`` with the socket's event frame as
    its data, and the stream opens with the session's epoch and head."""
    s = create_session(user)
    with client_for(server, user) as c:
        first = post(c, s.id, "m1", "/stream 5 0")
        wait_for(lambda: finished(first["run_id"]))
        with connect_sse(c, "GET", f"/api/sessions/{s.id}/stream/?after=2") as source:
            assert source.response.headers["content-type"].startswith("text/event-stream")
            events = source.iter_sse()
            opening = next(events)
            session = AgentSession.objects.get(id=s.id)
            assert opening.event == "stream"
            assert json.loads(opening.data) == {
                "session_id": s.id,
                "epoch": session.epoch,
                "head": session.head,
            }
            got = read_until(events, lambda e: e.id == str(session.head))
            second = post(c, s.id, "m2", "/stream 20 10")
            got += read_until(
                events,
                lambda e: (
                    e.event == "run.finished" and json.loads(e.data)["run_id"] == second["run_id"]
                ),
            )
    log = read_events(s.id, 2)
    assert [int(e.id) for e in got] == [e.seq for e in log]
    assert [e.event for e in got] == [e.kind for e in log]
    assert [json.loads(e.data) for e in got] == [
        json.loads(json.dumps(event_frame(e))) for e in log
    ]


def test_last_event_id_resumes_after_it(server, user):
    """A reconnect's ``Last-Event-ID`` wins over ``?after``: the next event is
    the one after it."""
    s = create_session(user)
    with client_for(server, user) as c:
        run = post(c, s.id, "m1", "/stream 5 0")
        wait_for(lambda: finished(run["run_id"]))
        headers = {"Last-Event-ID": "4"}
        with connect_sse(
            c, "GET", f"/api/sessions/{s.id}/stream/?after=1", headers=headers
        ) as source:
            events = source.iter_sse()
            assert next(events).event == "stream"
            assert next(events).id == "5"


def test_a_cursor_it_cannot_honour_ends_with_reset(server, user):
    """Past the head, or with another epoch: one ``reset`` event carrying the
    ``resume_rejected`` frame, and the response ends."""
    s = create_session(user)
    with client_for(server, user) as c:
        for query, reason in (("after=9", "cursor_ahead"), ("after=1&epoch=old", "epoch_mismatch")):
            with connect_sse(c, "GET", f"/api/sessions/{s.id}/stream/?{query}") as source:
                events = list(source.iter_sse())
            assert [e.event for e in events] == ["reset"]
            frame = json.loads(events[0].data)
            assert (frame["type"], frame["reason"]) == ("resume_rejected", reason)


def test_the_stream_has_the_apis_rights(server, user, other_user):
    """Anonymous: 403; another user's session or none: 404; a bad cursor: 400;
    anything but GET: 405. Nothing of the log is sent in any of them."""
    s = create_session(user)
    url = f"{server.http}/api/sessions/{s.id}/stream/"
    assert httpx.get(url, timeout=10).status_code == 403
    with client_for(server, other_user) as theirs:
        assert theirs.get(f"/api/sessions/{s.id}/stream/").status_code == 404
    with client_for(server, user) as c:
        assert c.get("/api/sessions/s_nope/stream/").status_code == 404
        assert c.get(f"/api/sessions/{s.id}/stream/?after=-1").status_code == 400
        assert c.get(f"/api/sessions/{s.id}/stream/?after=x").status_code == 400
        assert c.post(f"/api/sessions/{s.id}/stream/").status_code == 405


def test_idle_heartbeats_and_curl_reads_it(own_server, user):
    """``curl -N`` reads the stream as it comes: the log, then a comment
    every ``AGENT_SSE_HEARTBEAT_SECONDS`` while nothing happens."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("CURL IS NOT INSTALLED: the curl case of the SSE stream is not tested")
    start, _ = own_server
    server = start(AGENT_SSE_HEARTBEAT_SECONDS="0.3")
    s = create_session(user)
    key = api_key(user)
    proc = subprocess.Popen(
        [
            curl,
            "-N",
            "-s",
            "-H",
            f"Authorization: Token {key}",
            f"{server.http}/api/sessions/{s.id}/stream/?after=0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        beats = 0
        while beats < 2:
            line = proc.stdout.readline()
            assert line, f"curl's stream ended: {lines}"
            lines.append(line.rstrip("\n"))
            beats += line.startswith(": keep-alive")
    finally:
        proc.kill()
        proc.wait()
    assert lines[:2] == ["retry: 1000", "event: stream"]
    epoch = AgentSession.objects.get(id=s.id).epoch
    opening = {"session_id": s.id, "epoch": epoch, "head": 1}
    assert lines[2:4] == [f"data: {json.dumps(opening, separators=(',', ':'))}", ""]
    assert lines[4:6] == ["id: 1", "event: session.created"]
    assert json.loads(lines[6].removeprefix("data: "))["seq"] == 1


def test_a_log_rebuilt_while_streaming_ends_it_with_reset(own_server, user):
    """The session's epoch is rotated while a stream idles: its next check
    ends it with ``reset`` (``epoch_mismatch``), never a silent new log."""
    from sessions_app.log.retention import rotate_epoch

    start, _ = own_server
    server = start(AGENT_SSE_HEARTBEAT_SECONDS="0.3")
    s = create_session(user)
    with (
        client_for(server, user) as c,
        connect_sse(c, "GET", f"/api/sessions/{s.id}/stream/?after=0") as source,
    ):
        events = source.iter_sse()
        assert [next(events).event, next(events).id] == ["stream", "1"]
        rotate_epoch(s.id)
        rest = list(events)
    assert [e.event for e in rest] == ["reset"]
    assert json.loads(rest[0].data)["reason"] == "epoch_mismatch"


def test_compact_skips_the_superseded_deltas_of_a_finished_run(server, user):
    """With ``?compact=1`` a finished run's deltas are one ``compacted`` event
    (id: its last seq) followed by the run's message: every seq is covered
    once, in order."""
    s = create_session(user)
    with client_for(server, user) as c:
        run = post(c, s.id, "m1", "/stream 30 0")
        wait_for(lambda: finished(run["run_id"]))
        head = AgentSession.objects.get(id=s.id).head
        with connect_sse(c, "GET", f"/api/sessions/{s.id}/stream/?after=0&compact=1") as source:
            events = source.iter_sse()
            got = read_until(events, lambda e: e.id == str(head))
    kinds = [e.event for e in got]
    assert kinds[0] == "stream" and "assistant.delta" not in kinds
    stretch = json.loads(next(e for e in got if e.event == "compacted").data)
    assert stretch["to"] - stretch["from"] + 1 == 30
    covered = []
    for e in got[1:]:
        frame = json.loads(e.data)
        covered += (
            list(range(frame["from"], frame["to"] + 1))
            if e.event == "compacted"
            else [frame["seq"]]
        )
    assert covered == list(range(1, head + 1))


def test_streams_past_the_users_limit_wait_and_a_closed_one_frees_its_place(own_server, user):
    """At most ``AGENT_USER_MAX_SOCKETS`` streams of a user on a server: one
    more is 429 with Retry-After; a client that goes away frees its place."""
    start, _ = own_server
    server = start(AGENT_USER_MAX_SOCKETS="2")
    s = create_session(user)
    url = f"/api/sessions/{s.id}/stream/"
    with client_for(server, user) as c:
        with c.stream("GET", url) as one, c.stream("GET", url) as two:
            assert (one.status_code, two.status_code) == (200, 200)
            third = c.get(url)
            assert third.status_code == 429 and third.headers["Retry-After"] == "5"
        deadline = time.monotonic() + 10
        while True:
            with c.stream("GET", url) as again:
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "a closed stream kept its place"
            poll_pause()
