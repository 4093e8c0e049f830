"""Who a WebSocket belongs to: the session cookie's user, cheaply.

Three costs of Channels' ``AuthMiddlewareStack`` that a busy server pays:

- ``AuthMiddleware`` reads the session and the user on Channels' one shared
  database thread (``database_sync_to_async`` is thread-sensitive by
  default), so when every tab of a restarted server reconnects at once, each
  socket's authentication waits behind all the others'. The lookup needs
  nothing of that thread (two self-contained reads), so here it runs on the
  pool the socket's other database calls use (``db_pool``).
- ``SessionMiddleware`` wraps the socket's ``send`` to save a changed session
  and set its cookie, and so inspects the session on every frame sent: almost
  a quarter of a long replay's time in a profile. A socket never changes the
  session (login and logout are HTTP), so here the session is only read.
- Its two reads are built by the ORM, which cost more than the reads: for
  the default configuration ``user_lookup`` reads the rows in plain SQL.

Sockets that present the same session cookie within ``SHARE_SECONDS`` of a
lookup starting, while it is under way (a user's tabs reconnecting together
after a restart), share that one lookup: nothing is cached past it, and a
socket never takes a lookup older than that, so a logout is seen by every
socket that arrives more than ``SHARE_SECONDS`` after it (a socket doing its
own lookup has a window too: its query may run just before the logout; and a
socket already open at a logout stays open, as before). Measured on the
reconnect storm (docs/benchmarks.md): no sharing 27-54 s, 0.25 s 12-27 s,
2 s 9-11 s.

On the app's own socket paths the upgrade does not wait for the lookup at
all (``defer``): the lookup starts, the upgrade is answered, and the consumer
awaits the user (``user_of``) while the client's first frame is on its way.
A resume then waits for the lookup only where it outlasts that round trip.
"""

from __future__ import annotations

import asyncio
import copy

from channels.auth import AuthMiddleware
from channels.sessions import CookieMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

from sessions_app.access.user_lookup import lookup_user, session_store_class
from sessions_app.server.db_pool import reading_in_db_pool

_get_user = reading_in_db_pool(lookup_user)

# How recently a lookup must have started for another socket to share it.
SHARE_SECONDS = 2.0

# How long a lookup may take before it fails (the socket closes 1013, retryable).
LOOKUP_TIMEOUT_SECONDS = 10.0

# Session key -> the lookup under way for it (only while it is) and when it started.
_lookups: dict[str, tuple[asyncio.Future, float]] = {}


async def _shared_lookup(key: str, scope) -> object:
    loop = asyncio.get_running_loop()
    lookup, started = _lookups.get(key, (None, 0.0))
    if lookup is None or lookup.get_loop() is not loop or loop.time() - started > SHARE_SECONDS:
        # Bounded once for every socket that shares it: a database that does
        # not answer fails the lookup (TimeoutError) instead of holding them.
        lookup = loop.create_task(asyncio.wait_for(_get_user(scope), LOOKUP_TIMEOUT_SECONDS))
        _lookups[key] = (lookup, loop.time())
        lookup.add_done_callback(
            lambda done: _lookups.get(key, (None,))[0] is done and _lookups.pop(key)
        )
    # Shielded: one socket giving up does not cancel the others' lookup.
    user = await asyncio.shield(lookup)
    # Each socket its own instance, as with a lookup of its own.
    return copy.copy(user)


# The scope key of a lookup the consumer awaits itself (``user_of``).
_LOOKUP = "sessions_app.access.user_lookup"


async def user_of(scope):
    """The scope's user, once its lookup is done (at once if it was not
    deferred). A consumer of a deferred path must await this before it reads
    ``scope["user"]``."""
    lookup = scope.get(_LOOKUP)
    if lookup is not None:
        await asyncio.shield(lookup)
        # Done: the scope keeps the user, not the finished task (an idle
        # socket's memory; the middleware's own copy lets go of it too).
        scope.pop(_LOOKUP, None)
    return scope.get("user")


class PooledAuthMiddleware(AuthMiddleware):
    """``AuthMiddleware`` whose lookup runs on the database pool, shared by
    the sockets of one session cookie that arrive while it is under way. For
    a scope ``defer`` accepts, the inner application is called without
    waiting for the lookup: it awaits ``user_of(scope)`` itself."""

    def __init__(self, inner, defer=None):
        super().__init__(inner)
        self.defer = defer

    async def __call__(self, scope, receive, send):
        if self.defer is None or not self.defer(scope):
            return await super().__call__(scope, receive, send)
        scope = dict(scope)
        self.populate_scope(scope)
        lookup = scope[_LOOKUP] = asyncio.ensure_future(self.resolve_scope(scope))
        # Retrieved here too: an application that fails before it awaits the
        # lookup must not leave "exception never retrieved" behind. Once it
        # succeeded, this scope keeps the user, not the finished task.
        lookup.add_done_callback(
            lambda done: done.cancelled() or done.exception() or scope.pop(_LOOKUP, None)
        )
        del lookup  # this frame lives as long as the socket: it keeps no finished task
        return await self.inner(scope, receive, send)

    async def resolve_scope(self, scope):
        key = scope["session"].session_key
        if key:
            scope["user"]._wrapped = await _shared_lookup(key, scope)
        else:  # no cookie: anonymous, as the lookup would say, without one
            scope["user"]._wrapped = AnonymousUser()


class ReadOnlySessionMiddleware:
    """``scope["session"]``: the session cookie's session, loaded when first read
    (by the user lookup); ``send`` passes through untouched."""

    def __init__(self, inner):
        self.inner = inner
        self.store = session_store_class()

    async def __call__(self, scope, receive, send):
        key = scope["cookies"].get(settings.SESSION_COOKIE_NAME)
        return await self.inner(dict(scope, session=self.store(key)), receive, send)


def PooledAuthMiddlewareStack(inner, defer=None):  # noqa: N802 (named like Channels' own)
    """Cookies, session and user for ``inner``, as ``channels.auth.AuthMiddlewareStack``
    (``defer``: see ``PooledAuthMiddleware``)."""
    return CookieMiddleware(ReadOnlySessionMiddleware(PooledAuthMiddleware(inner, defer)))


def routes_matcher(deferred, before=()):
    """A ``defer`` for ``PooledAuthMiddleware``: true for a scope whose path
    one of the ``deferred`` routes takes and none of the ``before`` routes
    (matched first by the router: a project's own), matched as ``URLRouter``
    matches them."""

    def matches(routes, path: str) -> bool:
        return any(route.pattern.match(path) for route in routes)

    def defer(scope) -> bool:
        if scope.get("root_path") or "path_remaining" in scope:
            return False  # mounted under a prefix: the lookup is simply awaited
        path = scope.get("path", "").lstrip("/")
        return matches(deferred, path) and not matches(before, path)

    return defer
