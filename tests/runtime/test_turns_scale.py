"""Conversation control at scale (sessions_app/runtime/turns.py): a path and
a switch cost the path's length and the subtree's size, not the session's
run count; a session's turns are capped; a socket's regenerates, edits and
switches have a rate of their own."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app.log.sessions import create_session
from sessions_app.models import Run
from sessions_app.runtime import turns
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import SessionFull
from tests.support.sessions import open_session, send_text

pytestmark = pytest.mark.django_db


def _long(user, branches: int, depth: int, tag: str = ""):
    """A session of ``branches`` side paths (``depth`` runs each) off one root:
    ``branches * depth + 1`` runs (``tag`` in their ids); returns it and each
    branch's first run."""
    s = create_session(user)
    now = timezone.now()
    root = f"run_{tag}root"
    rows = [Run(id=root, session=s, client_message_id="m", text="x", message_seq=1)]
    firsts = []
    for b in range(branches):
        parent = root
        for d in range(depth):
            run_id = f"run_{tag}{b:04d}_{d:03d}"
            rows.append(
                Run(
                    id=run_id,
                    session=s,
                    client_message_id=f"m{b}.{d}",
                    text="x",
                    message_seq=2,
                    parent_id=parent,
                    status=Run.Status.FINISHED,
                    created_at=now,
                )
            )
            parent = run_id
        firsts.append(f"run_{tag}{b:04d}_000")
    Run.objects.bulk_create(rows, batch_size=2000)
    return s, firsts


def test_a_switch_in_a_20k_run_session_reads_one_branch(user):
    """20,000 runs in 400 branches of 50: a switch finds the newest leaf below
    its run and that leaf's path with two recursive queries (no read of the
    whole tree), and answers at once (the review's walked every run)."""
    s, firsts = _long(user, branches=400, depth=50)
    with CaptureQueriesContext(connection) as queries:
        began = time.perf_counter()
        path = turns.switch(s.id, firsts[7])
        took = time.perf_counter() - began
    assert path == ["run_root"] + [f"run_0007_{d:03d}" for d in range(50)]
    walks = [q["sql"] for q in queries if "RECURSIVE" in q["sql"].upper()]
    assert len(walks) == 2
    assert took < 1.0, f"{took:.2f} s"
    assert turns.history_path(s.id, "run_0007_049", 3) == [
        "run_0007_046",
        "run_0007_047",
        "run_0007_048",
    ]


def test_a_session_past_its_turn_cap_refuses_new_turns(user, settings):
    """Past ``AGENT_SESSION_MAX_RUNS`` a new turn is refused with
    ``session_full``, and nothing is logged."""
    settings.AGENT_SESSION_MAX_RUNS = 3
    s, _ = _long(user, branches=1, depth=2)
    head = s.head
    with pytest.raises(SessionFull):
        turns.send(s.id, p.Send("r", "m-new", "one more"), turns.Sender(by="alice"))
    s.refresh_from_db()
    assert s.head == head and Run.objects.filter(session=s).count() == 3


@pytest.mark.django_db(transaction=True)
async def test_switches_past_the_sockets_branch_rate_get_an_error_and_the_socket_lives(
    server, cookie
):
    """A socket that switches faster than ``BRANCH_RATE_PER_SECOND`` (past a
    burst of ``BRANCH_RATE_BURST``) gets ``error`` ``rate_limited`` for the
    excess, and keeps working."""
    c, sid = await open_session(server, cookie)
    first = await send_text(c, "hello", "m1")
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == first["run_id"])
    replies = []
    for i in range(p.BRANCH_RATE_BURST + 3):
        frame = {"type": "switch", "run_id": first["run_id"], "request_id": f"s{i}"}
        replies.append(await c.request(frame))
    kinds = [r["type"] for r in replies]
    assert kinds[: p.BRANCH_RATE_BURST] == ["switch_ok"] * p.BRANCH_RATE_BURST
    assert "error" in kinds and all(
        r["code"] == "rate_limited" for r in replies if r["type"] == "error"
    )
    pong = await c.request({"type": "ping"})
    assert pong["type"] == "pong"
    await c.close()
