"""Who a WebSocket belongs to: the session cookie's user, cheaply.

Two costs of Channels' ``AuthMiddlewareStack`` that a busy server pays:

- ``AuthMiddleware`` reads the session and the user on Channels' one shared
  database thread (``database_sync_to_async`` is thread-sensitive by
  default), so when every tab of a restarted server reconnects at once, each
  socket's authentication waits behind all the others'. The lookup needs
  nothing of that thread (two self-contained reads), so here it runs on the
  pool the socket's other database calls use (``socket_db``).
- ``SessionMiddleware`` wraps the socket's ``send`` to save a changed session
  and set its cookie, and so inspects the session on every frame sent: almost
  a quarter of a long replay's time in a profile. A socket never changes the
  session (login and logout are HTTP), so here the session is only read.
"""

from __future__ import annotations

from importlib import import_module

from channels.auth import AuthMiddleware, get_user
from channels.db import database_sync_to_async
from channels.sessions import CookieMiddleware
from django.conf import settings

_get_user = database_sync_to_async(get_user.func, thread_sensitive=False)


class PooledAuthMiddleware(AuthMiddleware):
    """``AuthMiddleware`` whose lookup runs on the database pool."""

    async def resolve_scope(self, scope):
        scope["user"]._wrapped = await _get_user(scope)


class ReadOnlySessionMiddleware:
    """``scope["session"]``: the session cookie's session, loaded when first read
    (by the user lookup); ``send`` passes through untouched."""

    def __init__(self, inner):
        self.inner = inner
        self.store = import_module(settings.SESSION_ENGINE).SessionStore

    async def __call__(self, scope, receive, send):
        key = scope["cookies"].get(settings.SESSION_COOKIE_NAME)
        return await self.inner(dict(scope, session=self.store(key)), receive, send)


def PooledAuthMiddlewareStack(inner):  # noqa: N802 (named like Channels' own)
    """Cookies, session and user for ``inner``, as ``channels.auth.AuthMiddlewareStack``."""
    return CookieMiddleware(ReadOnlySessionMiddleware(PooledAuthMiddleware(inner)))
