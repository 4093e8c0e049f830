"""The socket's user (``sessions_app.access.auth``): looked up on the database pool,
one lookup shared by the sockets of one cookie that arrive while it runs."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser

from sessions_app.access import auth
from tests.harness import session_cookie


def _scope(cookie_value: str | None):
    from importlib import import_module

    from django.conf import settings
    from django.utils.functional import LazyObject

    class _User(LazyObject):
        def _setup(self):
            raise ValueError("not resolved")

    store = import_module(settings.SESSION_ENGINE).SessionStore
    return {"session": store(cookie_value), "user": _User()}


class Gate:
    """Holds the lookups while ``release`` is clear; ``started`` gets the key
    of each lookup as it starts."""

    def __init__(self):
        self.started: asyncio.Queue[str] = asyncio.Queue()
        self.release = asyncio.Event()
        self.release.set()


@pytest.fixture
def gate():
    return Gate()


@pytest.fixture
def counted(monkeypatch, gate):
    """Counts the database lookups (the real ones, on the pool), each held at
    the gate until it is open."""
    calls = []
    real = auth._get_user

    async def lookup(scope):
        calls.append(scope["session"].session_key)
        gate.started.put_nowait(calls[-1])
        await gate.release.wait()
        return await real(scope)

    monkeypatch.setattr(auth, "_get_user", lookup)
    return calls


@pytest.mark.django_db(transaction=True)
async def test_sockets_of_one_cookie_share_a_lookup_under_way(counted, gate, user, other_user):
    """Five sockets of one cookie arriving together cost one lookup and each
    gets its own user object; another cookie has its own lookup."""
    mine = (await database_sync_to_async(session_cookie)(user)).split("=", 1)[1]
    theirs = (await database_sync_to_async(session_cookie)(other_user)).split("=", 1)[1]
    scopes = [_scope(mine) for _ in range(5)] + [_scope(theirs)]
    middleware = auth.PooledAuthMiddleware(None)
    gate.release.clear()  # every socket arrives while the lookups are under way
    waiting = asyncio.gather(*(middleware.resolve_scope(s) for s in scopes))
    assert {await gate.started.get(), await gate.started.get()} == {mine, theirs}
    gate.release.set()
    await waiting
    assert sorted(counted) == sorted([mine, theirs])
    users = [s["user"]._wrapped for s in scopes]
    assert [u.pk for u in users] == [user.pk] * 5 + [other_user.pk]
    assert len({id(u) for u in users}) == 6
    assert auth._lookups == {}


@pytest.mark.django_db(transaction=True)
async def test_nothing_is_kept_after_a_lookup(counted, user):
    """A socket that arrives after the lookup finished looks up again: a logout
    in between is seen (nothing is cached)."""
    from django.contrib.sessions.models import Session

    key = (await database_sync_to_async(session_cookie)(user)).split("=", 1)[1]
    middleware = auth.PooledAuthMiddleware(None)
    first = _scope(key)
    await middleware.resolve_scope(first)
    assert first["user"]._wrapped.pk == user.pk
    await database_sync_to_async(Session.objects.filter(session_key=key).delete)()
    later = _scope(key)
    await middleware.resolve_scope(later)
    assert isinstance(later["user"]._wrapped, AnonymousUser)
    assert counted == [key, key]


@pytest.mark.django_db(transaction=True)
async def test_one_socket_giving_up_does_not_fail_the_others(counted, gate, user):
    """A socket cancelled while waiting (its client left) leaves the shared
    lookup running for the sockets still waiting."""
    key = (await database_sync_to_async(session_cookie)(user)).split("=", 1)[1]
    middleware = auth.PooledAuthMiddleware(None)
    a, b = _scope(key), _scope(key)
    gate.release.clear()
    gone = asyncio.ensure_future(middleware.resolve_scope(a))
    stays = asyncio.ensure_future(middleware.resolve_scope(b))
    await gate.started.get()  # the lookup is under way, both sockets wait on it
    gone.cancel()
    gate.release.set()
    await stays
    assert b["user"]._wrapped.pk == user.pk and counted == [key]


@pytest.mark.django_db(transaction=True)
async def test_a_lookup_is_shared_only_while_recent(counted, gate, monkeypatch, user):
    """A socket arriving more than SHARE_SECONDS after a lookup started does its
    own, even while that one is under way (so a logout in between is seen)."""
    key = (await database_sync_to_async(session_cookie)(user)).split("=", 1)[1]
    monkeypatch.setattr(auth, "SHARE_SECONDS", -1.0)  # every lookup is already too old
    middleware = auth.PooledAuthMiddleware(None)
    gate.release.clear()
    first = asyncio.ensure_future(middleware.resolve_scope(_scope(key)))
    await gate.started.get()
    second = asyncio.ensure_future(middleware.resolve_scope(_scope(key)))
    await gate.started.get()  # its own lookup, while the first is still held
    gate.release.set()
    await asyncio.gather(first, second)
    assert counted == [key, key]


def _headers(cookie: str | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]
    return headers + ([(b"cookie", cookie.encode())] if cookie else [])


@pytest.fixture
def app(monkeypatch):
    """The app's WebSocket application, with a project's own socket at
    ``/ws/mine/`` that records the user it was called with."""
    from channels.generic.websocket import AsyncWebsocketConsumer
    from django.urls import path

    from sessions_app.asgi import websocket_application
    from sessions_app.fanout import presence

    # Not these tests' concern, and its broadcast would outlive their database.
    monkeypatch.setattr(presence, "request_presence", lambda session_id: None)

    class Mine(AsyncWebsocketConsumer):
        seen: list = []

        async def connect(self):
            self.seen.append(self.scope["user"].pk)  # raises if not resolved yet
            await self.accept()

    application = websocket_application(route for route in [path("ws/mine/", Mine.as_asgi())])
    application.seen = Mine.seen
    return application


@pytest.mark.django_db(transaction=True)
async def test_the_apps_sockets_are_accepted_before_their_lookup_a_projects_after(
    counted, gate, user, app
):
    """A project's own socket is called with its user resolved, as with Channels'
    stack; the session and list sockets' upgrades are accepted while the
    cookie's lookup is still held, and answered once it is done."""
    from channels.testing import WebsocketCommunicator

    from sessions_app.log.sessions import create_session

    cookie = await database_sync_to_async(session_cookie)(user)
    session = await database_sync_to_async(create_session)(user, "deferred")

    gate.release.clear()
    project = WebsocketCommunicator(app, "/ws/mine/", headers=_headers(cookie))
    connecting = asyncio.ensure_future(project.connect(timeout=10))
    await gate.started.get()
    assert app.seen == []  # the middleware holds the project's consumer until the lookup ends
    gate.release.set()
    assert (await connecting)[0] and app.seen == [user.pk]
    await project.disconnect()

    gate.release.clear()
    ours = WebsocketCommunicator(app, "/ws/sessions/", headers=_headers(cookie))
    connected, _ = await ours.connect(timeout=10)
    assert connected  # accepted while its lookup is held at the gate
    await gate.started.get()
    frame = {"type": "resume", "protocol": 1, "request_id": "r", "session_id": session.id}
    await ours.send_json_to({**frame, "after": 0})
    listing = WebsocketCommunicator(app, "/ws/list/", headers=_headers(cookie))
    assert (await listing.connect(timeout=10))[0]  # the same lookup, still held
    gate.release.set()
    reply = await ours.receive_json_from(timeout=10)
    assert reply["type"] == "resume_ok" and reply["session_id"] == session.id
    snapshot = await listing.receive_json_from(timeout=10)
    assert [s["id"] for s in snapshot["sessions"]] == [session.id]
    await ours.disconnect()
    await listing.disconnect()
    assert counted == [counted[0]] * 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/sessions/", "/ws/list/"])
async def test_a_lookup_that_does_not_end_is_a_retryable_close(
    counted, gate, user, app, monkeypatch, path
):
    """A lookup held past LOOKUP_TIMEOUT_SECONDS (a database that does not answer)
    closes the socket 1013, which the client retries, not 4401 or 4400."""
    from channels.testing import WebsocketCommunicator

    from sessions_app.wire import protocol

    monkeypatch.setattr(auth, "LOOKUP_TIMEOUT_SECONDS", 0.2)
    cookie = await database_sync_to_async(session_cookie)(user)
    gate.release.clear()
    comm = WebsocketCommunicator(app, path, headers=_headers(cookie))
    assert (await comm.connect(timeout=10))[0]
    closed = await comm.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": protocol.CLOSE_TRY_AGAIN}
    gate.release.set()
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/sessions/", "/ws/list/"])
async def test_a_failed_lookup_is_a_retryable_close(user, app, monkeypatch, path):
    """The database failing the lookup closes the socket 1011 (retryable), not
    4401: the client comes back instead of showing "signed out"."""
    from channels.testing import WebsocketCommunicator
    from django.db import OperationalError

    from sessions_app.wire import protocol

    async def failing(scope):
        raise OperationalError("the database went away")

    monkeypatch.setattr(auth, "_get_user", failing)
    cookie = await database_sync_to_async(session_cookie)(user)
    comm = WebsocketCommunicator(app, path, headers=_headers(cookie))
    assert (await comm.connect(timeout=10))[0]
    closed = await comm.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": protocol.CLOSE_INTERNAL_ERROR}
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_socket_without_a_cookie_is_refused_without_a_lookup(counted, app):
    """No session cookie: closed 4401 at once, and no database call was made."""
    from channels.testing import WebsocketCommunicator

    from sessions_app.wire import protocol

    comm = WebsocketCommunicator(app, "/ws/sessions/", headers=_headers(None))
    assert (await comm.connect(timeout=10))[0]
    closed = await comm.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": protocol.CLOSE_NOT_AUTHENTICATED}
    assert counted == []
