"""What both sockets get from ``sessions_app.sockets.base.AppSocket``: flow
control on every send (error replies and pongs included), bounded echoes,
the per-user cap, group renewal and close labels from a fixed set."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from sessions_app.delivery.flow import Flow
from tests.harness import Daphne, WsClient, rss_kib
from tests.raw_http import client_frame, raw_socket_that_never_reads
from tests.support.clients import http_get
from tests.support.waiting import wait_until

SOCKETS = {"session": "/ws/sessions/", "list": "/ws/list/"}
METRICS_TOKEN = "metrics-token-for-tests"


def _metric(daphne: Daphne, name: str, **labels: str) -> float:
    status, text = http_get(daphne.http + "/metrics", METRICS_TOKEN)
    assert status == 200, text
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    match = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def _series(daphne: Daphne, name: str) -> set[str]:
    status, text = http_get(daphne.http + "/metrics", METRICS_TOKEN)
    assert status == 200, text
    return set(re.findall(rf"^{name}\{{([^}}]*)\}}", text, re.M))


@pytest.mark.slow
@pytest.mark.parametrize("kind", SOCKETS)
async def test_error_reply_amplification_leaves_memory_bounded(
    kind, cookie, user, tmp_path, transactional_db
):
    """The review's attack: a socket that reads nothing sends ~60 KB frames of
    an unknown type, 28 a second (under the rate limit), for 15 s. On the
    version reviewed each reply echoed the type (about 300 KB) and daphne grew
    by 135 MiB; now a reply quotes 40 characters and waits for the reader like
    every send, and daphne grows by a few MiB at most."""
    daphne = Daphne(tmp_path).start()
    try:
        sock = await asyncio.to_thread(
            raw_socket_that_never_reads, daphne.port, cookie, SOCKETS[kind]
        )
        if kind == "session":
            sock.sendall(client_frame(json.dumps({"type": "start", "protocol": 1})))
        before = rss_kib(daphne.proc.pid)
        # DEL, sent raw: repr() makes each one 4 characters and JSON 5.
        junk = client_frame(
            json.dumps({"type": "\x7f" * 60_000, "request_id": "r" * 128}, ensure_ascii=False)
        )
        for _ in range(15 * 28):
            await asyncio.to_thread(sock.sendall, junk)
            await asyncio.sleep(1 / 28)  # sleep-ok: the attack's pace, under the rate limit
        grown_mib = (rss_kib(daphne.proc.pid) - before) / 1024
        assert grown_mib < 30, f"daphne grew by {grown_mib:.0f} MiB"
        sock.close()
    finally:
        daphne.stop()


class _Transport:
    """What a socket sees of daphne: the bytes waiting unread, and what it sent."""

    def __init__(self, unread: int):
        self.unread = unread
        self.messages: list[dict] = []
        self.sent = asyncio.Event()

    async def base_send(self, message: dict) -> None:
        self.messages.append(message)
        self.sent.set()


def _socket(cls, transport: _Transport):
    socket = cls()
    socket.scope = {"type": "websocket"}
    socket.flow = Flow(lambda: transport.unread)
    socket.base_send = transport.base_send
    return socket


@pytest.mark.parametrize("frame", [{"type": "pong"}, {"type": "error", "code": "unknown_type"}])
@pytest.mark.parametrize("kind", ["session", "list"])
async def test_every_reply_waits_for_a_slow_reader_and_closes_it_4408(kind, frame, settings):
    """Whatever the frame (a pong, an error reply), a socket whose client has
    more than AGENT_SEND_BUFFER_BYTES unread does not send it; past
    AGENT_SLOW_CONSUMER_SECONDS it is closed 4408 instead. A client that reads
    gets it at once."""
    from sessions_app.sockets.listing import SessionListConsumer
    from sessions_app.sockets.session import SessionConsumer

    cls = SessionConsumer if kind == "session" else SessionListConsumer
    settings.AGENT_SEND_BUFFER_BYTES = 1000
    settings.AGENT_SLOW_CONSUMER_SECONDS = 0.2
    stalled = _Transport(unread=5000)
    await _socket(cls, stalled).send_frame(frame)
    assert stalled.messages == [{"type": "websocket.close", "code": 4408}]

    reading = _Transport(unread=0)
    await _socket(cls, reading).send_frame(frame)
    assert [json.loads(m["text"]) for m in reading.messages] == [frame]


@pytest.mark.parametrize("kind", SOCKETS)
async def test_an_error_reply_quotes_a_short_prefix_of_the_input(kind, server, cookie):
    """An unknown 60 KB ``type`` is answered with an error that quotes at most
    40 characters of it, and the socket lives on."""
    ws = await WsClient.connect(server.ws.replace("/ws/sessions/", SOCKETS[kind]), cookie)
    if kind == "session":
        await ws.start()
    else:
        await ws.wait(lambda f: f.get("type") == "sessions")
    reply = await ws.request({"type": "y" * 60_000, "request_id": ws.rid()})
    assert reply["type"] == "error" and reply["code"] == "unknown_type"
    assert len(json.dumps(reply)) < 300, reply
    assert (await ws.request({"type": "ping"}))["type"] == "pong"
    await ws.close()


async def test_a_resume_rejection_does_not_echo_a_long_session_id(server, cookie):
    """``resume_rejected`` repeats a session id only if it is one."""
    ws = await WsClient.connect(server.ws, cookie)
    reply = await ws.request(
        {"type": "resume", "protocol": 1, "session_id": "z" * 50_000, "after": 0}
    )
    assert reply["type"] == "resume_rejected" and reply["session_id"] is None
    assert len(json.dumps(reply)) < 300
    await ws.close()


async def test_the_list_socket_has_the_per_user_cap(cookie, user, tmp_path, transactional_db):
    """Past AGENT_USER_MAX_SOCKETS list sockets of one user, the next is closed
    4429 (retryable), and the others still get their snapshot."""
    daphne = Daphne(tmp_path, AGENT_USER_MAX_SOCKETS="3").start()
    url = daphne.ws.replace("/ws/sessions/", "/ws/list/")
    try:
        listers = [await WsClient.connect(url, cookie) for _ in range(3)]
        for lister in listers:
            await lister.wait(lambda f: f.get("type") == "sessions")
        extra = await WsClient.connect(url, cookie)
        assert await extra.wait_closed() == 4429
        for lister in listers:
            await lister.close()
    finally:
        daphne.stop()


@pytest.mark.slow
async def test_the_list_socket_outlives_the_channel_layers_group_expiry(
    cookie, user, tmp_path, transactional_db
):
    """With a 2 s group expiry, a list socket open for 8 s still hears a new
    session by push: it renews its groups as the session socket does."""
    daphne = Daphne(tmp_path, CHANNEL_GROUP_EXPIRY="2").start()
    try:
        lister = await WsClient.connect(daphne.ws.replace("/ws/sessions/", "/ws/list/"), cookie)
        await lister.wait(lambda f: f.get("type") == "sessions")
        # Time passing is what is under test: outlive the expiry twice over.
        await asyncio.sleep(4.5)  # sleep-ok: past the layer's group expiry, twice over
        tab = await WsClient.connect(daphne.ws, cookie)
        sid = (await tab.start())["session_id"]
        pushed = await lister.wait(
            lambda f: f.get("type") == "session" and f["session"]["id"] == sid
        )
        assert pushed["session"]["id"] == sid
        await tab.close()
        await lister.close()
    finally:
        daphne.stop()


async def test_client_chosen_close_codes_do_not_make_metric_series(
    cookie, user, tmp_path, transactional_db
):
    """Clients closing with 3123, 3777 and 4998 are counted under ``other``; no
    series is named after a code a client chose."""
    daphne = Daphne(tmp_path, AGENT_METRICS_TOKEN=METRICS_TOKEN).start()
    try:
        for code in (3123, 3777, 4998):
            ws = await WsClient.connect(daphne.ws, cookie)
            await ws.start()
            await ws.ws.close(code=code)
        await wait_until(lambda: _metric(daphne, "agent_socket_closes_total", code="other") >= 3)
        codes = _series(daphne, "agent_socket_closes_total")
        assert not any(c in s for s in codes for c in ("3123", "3777", "4998")), codes
    finally:
        daphne.stop()


def test_close_label_names_known_codes_only():
    """Known codes are their own label; anything else is ``other``."""
    from sessions_app.server.metrics import close_label

    assert close_label(4408) == "4408" and close_label(1012) == "1012"
    assert close_label(4998) == "other" and close_label(3000) == "other"
    assert close_label(None) == "other"


async def test_a_failing_push_closes_the_list_socket_1011_and_frees_its_place(monkeypatch):
    """An exception in a list socket's handler (a database blip while a push
    is read) closes it 1011 (retryable) instead of ending the consumer
    without its cleanup: the dispatch guard is the base's, for both sockets."""
    from sessions_app.sockets import listing as list_consumer
    from sessions_app.sockets.listing import SessionListConsumer

    async def broken(*args):
        raise ConnectionError("the database went away")

    monkeypatch.setattr(list_consumer, "summary_in_pool", broken)
    transport = _Transport(unread=0)
    socket = _socket(SessionListConsumer, transport)
    socket.user = type("U", (), {"pk": 1})()
    await socket.dispatch({"type": "sessions.changed", "session_id": "s" * 22})
    # The push reads after the coalescing window, off the handler's path.
    await asyncio.wait_for(transport.sent.wait(), 5)
    assert transport.messages == [{"type": "websocket.close", "code": 1011}]


async def test_a_socket_whose_rights_ended_before_its_join_is_closed_4403(user, transactional_db):
    """A revocation published between the cookie's lookup and the join of the
    rights group never reaches the socket: its first database read after the
    join (the session socket's first tail check, the list socket's snapshot)
    reads the rights too, once, and a socket whose rights are gone is closed
    4403."""
    from channels.db import database_sync_to_async

    from sessions_app.delivery import reads
    from sessions_app.log.sessions import create_session
    from sessions_app.sockets.listing import SessionListConsumer, _snapshot

    session = await database_sync_to_async(create_session)(user)
    granted = (user.pk, user.password)
    transport = _Transport(unread=0)
    socket = _socket(SessionListConsumer, transport)
    socket.granted, socket.rights_checked, socket.rights_due = granted, False, 0.0
    socket.rights_joined = asyncio.get_running_loop().create_future()
    assert socket.rights_to_check() is None  # not joined yet: nothing to read
    socket.rights_joined.set_result(None)
    assert socket.rights_to_check() == granted
    state, ok = await reads.tail_state(session.id, granted)
    assert state[0] == 1 and ok is True
    await socket.rights_read(ok)
    assert socket.rights_to_check() is None and transport.messages == []  # read once

    user.is_active = False
    await database_sync_to_async(user.save)()
    assert (await reads.tail_state(session.id, granted))[1] is False
    assert (await reads.tail_state(session.id, None))[1] is None
    assert (await _snapshot(user.pk, granted))[1] is False
    assert (await _snapshot(user.pk, None))[1] is None
    await socket.rights_read(False)
    assert transport.messages == [{"type": "websocket.close", "code": 4403}]


@pytest.mark.parametrize(
    "error, traced",
    [(ConnectionRefusedError("the database went away"), False), (KeyError("a bug"), True)],
)
async def test_a_failed_handler_closes_1011_and_an_outage_is_one_line(error, traced, caplog):
    """A handler that fails closes its socket 1011 (retryable) either way; an
    outage (a service out of reach) is one line for many sockets, a bug its
    traceback each time."""
    from sessions_app.sockets.listing import SessionListConsumer

    class Failing(SessionListConsumer):
        async def websocket_receive(self, message):
            raise error

    sockets = [_socket(Failing, _Transport(unread=0)) for _ in range(3)]
    with caplog.at_level("ERROR", logger="sessions_app.sockets.session"):
        for socket in sockets:
            await socket.dispatch({"type": "websocket.receive", "text": "{}"})
    closes = [m for s in sockets for m in s.base_send.__self__.messages]
    assert closes == [{"type": "websocket.close", "code": 1011}] * 3
    lines = [r for r in caplog.records if "websocket.receive" in r.getMessage()]
    # (At most one: an outage line of an earlier test in this process may
    # have started the 10 s window already.)
    assert len(lines) == 3 if traced else len(lines) <= 1
    assert all((r.exc_info is not None) is traced for r in lines)
