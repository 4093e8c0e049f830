"""The replay/live boundary under load, and fan-out across server processes."""

from __future__ import annotations

import asyncio
import random

import pytest

from sessions_app.log.events import append_event
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession
from tests.harness import Daphne, WsClient

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = 2000
CLIENTS = 20


async def test_resume_at_random_cursors_during_a_fast_append_stream(server, cookie):
    """2,000 events appended flat out while 20 clients resume at random cursors at
    random moments: each receives exactly after+1 … last, nothing missing or twice."""
    rng = random.Random(20261202)
    watcher = await WsClient.connect(server.ws, cookie)
    ok = await watcher.start()
    sid, epoch = ok["session_id"], ok["epoch"]
    sent = await watcher.request(
        {"type": "send", "client_message_id": "load", "text": f"/stream {EVENTS} 0"}
    )
    run_id = sent["run_id"]

    async def resume_later(threshold: int) -> tuple[int, WsClient]:
        # A "random moment": once the log has reached `threshold`.
        await watcher.wait_event(lambda f: f["seq"] >= threshold, timeout=60)
        after = rng.randint(0, threshold)
        client = await WsClient.connect(server.ws, cookie)
        reply = await client.resume(sid, after, epoch=epoch if after else None)
        assert reply["type"] == "resume_ok", reply
        return after, client

    thresholds = sorted(rng.randint(1, EVENTS) for _ in range(CLIENTS))
    clients = await asyncio.gather(*(resume_later(t) for t in thresholds))
    end = await watcher.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id, timeout=120
    )
    last = end["seq"]
    assert AgentSession.objects.get(id=sid).head == last
    assert watcher.seqs() == list(range(1, last + 1))
    for after, client in clients:
        await client.wait_event(lambda f, last=last: f["seq"] == last, timeout=60)
        assert client.seqs() == list(range(after + 1, last + 1)), f"resumed after {after}"
        await client.close()
    deltas = [e for e in watcher.events() if e["kind"] == "assistant.delta"]
    assert len(deltas) == EVENTS
    await watcher.close()


@pytest.mark.postgres
async def test_second_server_receives_events_appended_through_the_first(
    server, cookie, tmp_path, user
):
    """Two daphne processes on PostgreSQL + Redis: a socket on the second receives,
    live, events appended through the first (and by a run worker)."""
    second = Daphne(tmp_path).start()
    try:
        a = await WsClient.connect(server.ws, cookie)
        ok = await a.start()
        sid = ok["session_id"]
        b = await WsClient.connect(second.ws, cookie)
        await b.resume(sid, 0)
        await b.wait(lambda f: f["type"] == "presence" and f["viewers"] == 2)
        sent = await a.request({"type": "send", "client_message_id": "x", "text": "/stream 5 0"})
        end = await b.wait_event(
            lambda f: f["kind"] == "run.finished" and f["run_id"] == sent["run_id"]
        )
        await a.wait_event(lambda f: f["seq"] == end["seq"])
        assert b.seqs() == list(range(1, end["seq"] + 1))
        assert a.seqs() == b.seqs()
        # And an append from a third process (this test) reaches both, live.
        ev = await asyncio.to_thread(append_event, sid, "assistant.delta", {"text": "x"})
        await b.wait_event(lambda f: f["seq"] == ev.seq)
        await a.wait_event(lambda f: f["seq"] == ev.seq)
        await a.close()
        await b.close()
    finally:
        second.stop()


@pytest.mark.postgres
async def test_many_writers_many_servers(server, cookie, tmp_path, user):
    """Appends from the test process and runs on workers interleave; every socket on
    two servers sees 1..N exactly."""
    second = Daphne(tmp_path).start()
    try:
        s = await asyncio.to_thread(create_session, user)
        socks = []
        for srv in (server, second, server, second):
            c = await WsClient.connect(srv.ws, cookie)
            await c.resume(s.id, 0)
            socks.append(c)
        sent = await socks[0].request(
            {"type": "send", "client_message_id": "w", "text": "/stream 300 0"}
        )

        def burst():
            for i in range(300):
                append_event(s.id, "assistant.delta", {"text": f"ext{i}"})

        await asyncio.gather(asyncio.to_thread(burst), asyncio.to_thread(burst))
        end = await socks[1].wait_event(
            lambda f: f["kind"] == "run.finished" and f["run_id"] == sent["run_id"], timeout=60
        )
        last = max(
            end["seq"], await asyncio.to_thread(lambda: AgentSession.objects.get(id=s.id).head)
        )
        for c in socks:
            await c.wait_event(lambda f, last=last: f["seq"] == last, timeout=60)
            assert c.seqs() == list(range(1, last + 1))
            await c.close()
    finally:
        second.stop()
