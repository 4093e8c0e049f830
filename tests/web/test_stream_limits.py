"""The SSE stream on the delivery stage (sessions_app/web/stream.py): the third
review's findings, each refused. Flow control before every write (readers that
never read, plain and over TLS), a slot given back on every way out, a logout
or a revoked key ending the stream, a hole never skipped, the epoch read once
joined, and groups that outlive the layer's expiry."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import threading
import time

import httpx
import pytest
from channels.db import database_sync_to_async
from django.test import AsyncRequestFactory

from sessions_app.access.tokens import issue, revoke
from sessions_app.log.events import purge_events
from sessions_app.log.retention import rotate_epoch
from sessions_app.log.sessions import create_session
from sessions_app.models import ApiToken
from sessions_app.web import stream
from tests.access.test_logout import _logout
from tests.harness import Daphne, api_key, session_cookie
from tests.raw_http import ask_and_leave, self_signed_certificate
from tests.sockets.test_session_limits import _big_log
from tests.support.rig import Hold
from tests.support.waiting import poll_pause

pytestmark = pytest.mark.django_db(transaction=True)

STALLED = re.compile(r"stream of \S+: ending a client that stopped reading")


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def raw_stream_that_never_reads(port: int, path: str, cookie: str, tls=None) -> socket.socket:
    """A GET of the stream, by hand, with a tiny receive buffer, then no reading."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        sock = context.wrap_socket(sock, server_hostname="localhost")
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n\r\n".encode())
    return sock


@pytest.mark.slow
@pytest.mark.parametrize("over", ["plain", "tls"])
def test_streams_that_never_read_leave_memory_bounded(over, user, cookie, tmp_path):
    """The review's attack: 20 streams of a 30k-event (5.6 MB) log that read
    nothing took a daphne from 128 to 237 MiB, each holding what the kernel
    would not take of the whole log. Now each waits before every write while
    its reader has the limit unread (256 KiB here), and is ended after the
    slow-consumer period: the daphne's peak grows by about 36 MiB (the
    database's page caches included), under 50 whatever the log's length."""
    tls = self_signed_certificate(tmp_path) if over == "tls" else None
    daphne = Daphne(
        tmp_path, tls=tls, AGENT_SLOW_CONSUMER_SECONDS="3", AGENT_SEND_BUFFER_BYTES="262144"
    ).start()
    socks = []
    try:
        s = _big_log(user, 30_000, 150)
        path = f"/api/sessions/{s.id}/stream/?after=0"
        before = peak_rss_kib(daphne.proc.pid)
        socks = [raw_stream_that_never_reads(daphne.port, path, cookie, tls) for _ in range(20)]
        deadline = time.monotonic() + 60
        while len(STALLED.findall(daphne.log_text())) < 20:
            assert time.monotonic() < deadline, "the streams were not ended"
            poll_pause()
        grown = (peak_rss_kib(daphne.proc.pid) - before) / 1024
        assert grown < 50, f"daphne's peak grew by {grown:.0f} MiB"
    finally:
        for sock in socks:
            sock.close()
        daphne.stop()


def test_quick_closes_give_every_slot_back(user, cookie, tmp_path):
    """200 clients that leave as soon as they asked (before the body starts)
    keep no slot: with 2 slots a user, two streams still open afterwards (the
    review lost 17 of 40 and then got 429 until a restart)."""
    daphne = Daphne(tmp_path, AGENT_USER_MAX_SOCKETS="2").start()
    try:
        s = create_session(user)
        path = f"/api/sessions/{s.id}/stream/"
        for _ in range(200):
            ask_and_leave(daphne.port, path, cookie)
        name, value = cookie.split("=", 1)
        with httpx.Client(base_url=daphne.http, cookies={name: value}, timeout=10) as c:
            deadline = time.monotonic() + 15
            while True:
                with c.stream("GET", path) as one, c.stream("GET", path) as two:
                    if (one.status_code, two.status_code) == (200, 200):
                        break
                assert time.monotonic() < deadline, "quick closes kept their slots"
                poll_pause()
    finally:
        daphne.stop()


def _ends_within(response: httpx.Response, act, seconds: float) -> float:
    """Read ``response`` on a thread, do ``act``; how long after it the stream ended."""
    ended = threading.Event()

    def read() -> None:
        try:
            for _ in response.iter_raw():
                pass
        except httpx.HTTPError:
            pass
        ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    began = time.monotonic()
    act()
    assert ended.wait(seconds), f"the stream went on {seconds} s after"
    return time.monotonic() - began


def test_a_logout_ends_a_cookie_stream_within_a_second(server, user):
    """Signing out ends every stream of that cookie at once (the review's went
    on for 20 s), and the next request is refused."""
    cookie = session_cookie(user)
    s = create_session(user)
    name, value = cookie.split("=", 1)
    with httpx.Client(base_url=server.http, cookies={name: value}, timeout=30) as c:
        with c.stream("GET", f"/api/sessions/{s.id}/stream/") as response:
            assert response.status_code == 200
            _ends_within(response, lambda: _logout(server, cookie), 1.0)
        assert c.get(f"/api/sessions/{s.id}/stream/").status_code == 403


def test_a_revoked_key_ends_its_streams(server, user):
    """Revoking a key (its owner, signed in, through the API) ends the streams
    opened with it at once; one revoked elsewhere (a command) is seen at the
    next heartbeat."""
    token, key = issue(user)
    s = create_session(user)
    headers = {"Authorization": f"Token {key}"}
    name, value = session_cookie(user).split("=", 1)
    with httpx.Client(base_url=server.http, cookies={name: value}, timeout=30) as owner:
        owner.get("/accounts/login/")  # sets the CSRF cookie on the client
        csrf = owner.cookies.get("csrftoken") or ""

        def revoke_through_the_api():
            done = owner.delete(
                f"/api/tokens/{token.pk}/",
                headers={"X-CSRFToken": csrf, "Referer": server.http + "/"},
            )
            assert done.status_code == 204, done.text

        with httpx.Client(base_url=server.http, headers=headers, timeout=30) as c:
            with c.stream("GET", f"/api/sessions/{s.id}/stream/") as response:
                assert response.status_code == 200
                _ends_within(response, revoke_through_the_api, 1.0)
            assert c.get(f"/api/sessions/{s.id}/stream/").status_code == 403


def test_a_key_revoked_by_another_process_ends_at_a_heartbeat(user, tmp_path):
    """A revocation whose message cannot reach the server (the embedded
    profile's layer is in one process) is read at the next heartbeat."""
    daphne = Daphne(tmp_path, AGENT_SSE_HEARTBEAT_SECONDS="0.5").start()
    try:
        token, key = issue(user)
        s = create_session(user)
        headers = {"Authorization": f"Token {key}"}
        with (
            httpx.Client(base_url=daphne.http, headers=headers, timeout=30) as c,
            c.stream("GET", f"/api/sessions/{s.id}/stream/") as response,
        ):
            assert response.status_code == 200
            _ends_within(response, lambda: revoke(ApiToken.objects.filter(pk=token.pk)), 5.0)
    finally:
        daphne.stop()


@pytest.mark.slow
def test_groups_are_renewed_past_the_layers_expiry(user, tmp_path):
    """With a 2 s group expiry, a stream open for 5 s still gets a message
    sent meanwhile live, before any heartbeat (the review's got events only
    at heartbeats)."""
    daphne = Daphne(tmp_path, CHANNEL_GROUP_EXPIRY="2", AGENT_SSE_HEARTBEAT_SECONDS="60").start()
    try:
        s = create_session(user)
        headers = {"Authorization": f"Token {api_key(user)}"}
        with (
            httpx.Client(base_url=daphne.http, headers=headers, timeout=30) as c,
            c.stream("GET", f"/api/sessions/{s.id}/stream/") as response,
        ):
            lines = response.iter_lines()
            while next(lines) != "id: 1":
                pass
            # Time passing is what is under test: outlive the expiry twice over.
            time.sleep(5)  # sleep-ok: past the layer's group expiry
            # Sent through the same server: published where the stream listens.
            with httpx.Client(base_url=daphne.http, headers=headers, timeout=30) as other:
                sent = other.post(
                    f"/api/sessions/{s.id}/messages/",
                    json={"client_message_id": "m-late", "text": "still here"},
                )
            assert sent.status_code == 201, sent.text
            while (line := next(lines)) != "event: user.message":
                assert not line.startswith(": keep-alive"), "only a heartbeat found it"
    finally:
        daphne.stop()


# --- in-process: the view, with the delivery stage's reads under the test's control


async def _read_all(response) -> list[bytes]:
    chunks = []
    async for chunk in response.streaming_content:
        chunks.append(chunk)
    response.close()
    return chunks


def _request(user, session_id: str, **params):
    request = AsyncRequestFactory().get(f"/api/sessions/{session_id}/stream/", params)

    async def auser():
        return user

    request.auser = auser
    request.user = user  # as Django's auth middleware leaves it (DRF reads it)

    class NoSession:
        session_key = None

    request.session = NoSession()
    return request


def _events(chunks: list[bytes]) -> list[tuple[str, dict]]:
    out = []
    for block in b"".join(chunks).decode().split("\n\n"):
        name = re.search(r"^event: (.+)$", block, re.M)
        data = re.search(r"^data: (.+)$", block, re.M)
        if name and data:
            out.append((name.group(1), json.loads(data.group(1))))
    return out


async def test_a_hole_under_the_stream_ends_it_with_reset(user, monkeypatch):
    """The log is purged between two pages of a replay: the stream sends the
    first page, then ``event: reset`` with ``cursor_expired`` (never a skip)."""
    from sessions_app.delivery import reads

    s = await database_sync_to_async(_big_log)(user, 1200, 10)
    real_page = reads.events_page
    pages = 0

    async def page_then_purge(session_id, after, upto):
        nonlocal pages
        pages += 1
        if pages == 2:
            await database_sync_to_async(purge_events)(s.id, keep=10)
        return await real_page(session_id, after, upto)

    monkeypatch.setattr(reads, "events_page", page_then_purge)
    response = await stream.session_stream(_request(user, s.id), s.id)
    events = _events(await _read_all(response))
    seqs = [data["seq"] for name, data in events if name not in ("stream", "reset")]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) == reads.REPLAY_PAGE
    name, data = events[-1]
    assert name == "reset" and data["reason"] == "cursor_expired"
    assert stream.slots.open[user.pk] == 0


async def test_a_rotation_before_the_join_is_seen_once_joined(user, monkeypatch):
    """The epoch is read again once the stream is in its groups: a log rebuilt
    between the view's check and the join ends it with ``epoch_mismatch``."""
    from sessions_app.delivery.groups import Membership

    s = await database_sync_to_async(create_session)(user)
    real_join = Membership.join

    async def join_after_a_rotation(self, *groups):
        await database_sync_to_async(rotate_epoch)(s.id)
        await real_join(self, *groups)

    monkeypatch.setattr(Membership, "join", join_after_a_rotation)
    response = await stream.session_stream(_request(user, s.id, epoch=s.epoch), s.id)
    events = _events(await _read_all(response))
    assert [name for name, _ in events] == ["reset"]
    assert events[0][1]["reason"] == "epoch_mismatch"


async def test_a_response_closed_before_its_body_gives_its_slot_back(user, settings):
    """A client that leaves before the body starts: the response's close gives
    the slot back (the generator never ran, so it could not)."""
    settings.AGENT_USER_MAX_SOCKETS = 1
    s = await database_sync_to_async(create_session)(user)
    first = await stream.session_stream(_request(user, s.id), s.id)
    assert first.status_code == 200
    refused = await stream.session_stream(_request(user, s.id), s.id)
    assert refused.status_code == 429
    await asyncio.to_thread(first.close)  # as Django's handler does, from a thread
    again = await stream.session_stream(_request(user, s.id), s.id)
    assert again.status_code == 200
    again.close()


async def test_from_zero_a_stale_epoch_is_no_reason_to_reset(user):
    """A client that starts again from 0 (as a reset told it) may keep its old
    ``?epoch=``: from 0 the stream takes the log as it is now (the review found
    it reset again, forever)."""
    s = await database_sync_to_async(create_session)(user)
    old = s.epoch
    await database_sync_to_async(rotate_epoch)(s.id)
    response = await stream.session_stream(_request(user, s.id, after=0, epoch=old), s.id)
    chunks = []
    async for chunk in response.streaming_content:
        chunks.append(chunk)
        if b"id: 1\n" in chunk:
            break
    response.close()
    names = [name for name, _ in _events(chunks)]
    assert names[0] == "stream" and "reset" not in names


def test_a_key_that_expires_ends_a_busy_stream(user, tmp_path):
    """A key's expiry sends no message: the stream reads its standing every
    heartbeat period even while events flow (the review's read it only when
    idle), and ends."""
    from datetime import timedelta

    from django.utils import timezone

    daphne = Daphne(tmp_path, AGENT_SSE_HEARTBEAT_SECONDS="0.5").start()
    try:
        token, key = issue(user)
        s = create_session(user)
        headers = {"Authorization": f"Token {key}"}
        with (
            httpx.Client(base_url=daphne.http, headers=headers, timeout=30) as c,
            c.stream("GET", f"/api/sessions/{s.id}/stream/") as response,
        ):
            sent = c.post(
                f"/api/sessions/{s.id}/messages/",
                json={"client_message_id": "busy", "text": Hold().text},
            )
            assert sent.status_code == 201, sent.text

            def expire():
                ApiToken.objects.filter(pk=token.pk).update(
                    expires_at=timezone.now() - timedelta(seconds=1)
                )

            _ends_within(response, expire, 4.0)  # the answer is held: it never ends
    finally:
        daphne.stop()


def test_the_stream_has_the_apis_request_rate(user, cookie, tmp_path):
    """Opening the stream counts against the user's AGENT_API_RATE like a
    REST request: past it a 429 with Retry-After and a JSON reason, and no
    stream (the stream had no rate at all)."""
    daphne = Daphne(tmp_path, AGENT_API_RATE="3/minute").start()
    try:
        s = create_session(user)
        path = f"/api/sessions/{s.id}/stream/"
        name, value = cookie.split("=", 1)
        with httpx.Client(base_url=daphne.http, cookies={name: value}, timeout=10) as c:
            for _ in range(3):
                with c.stream("GET", path) as opened:
                    assert opened.status_code == 200
            refused = c.get(path)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
        assert refused.json()["code"] == "throttled"
    finally:
        daphne.stop()
