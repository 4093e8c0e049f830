"""Who a WebSocket belongs to: Channels' session-cookie authentication, pooled.

Channels' ``AuthMiddleware`` reads the session and the user on its one shared
database thread (``database_sync_to_async`` is thread-sensitive by default),
so when a server restarts and every tab reconnects at once, each socket's
authentication waits behind all the others'. The lookup needs nothing of that
thread (two self-contained reads), so here it runs on the pool the socket's
other database calls use (``socket_db``).
"""

from __future__ import annotations

from channels.auth import AuthMiddleware, get_user
from channels.db import database_sync_to_async
from channels.sessions import CookieMiddleware, SessionMiddleware

_get_user = database_sync_to_async(get_user.func, thread_sensitive=False)


class PooledAuthMiddleware(AuthMiddleware):
    """``AuthMiddleware`` whose lookup runs on the database pool."""

    async def resolve_scope(self, scope):
        scope["user"]._wrapped = await _get_user(scope)


def PooledAuthMiddlewareStack(inner):  # noqa: N802 (named like Channels' own)
    """Cookies, session and user for ``inner``, as ``channels.auth.AuthMiddlewareStack``."""
    return CookieMiddleware(SessionMiddleware(PooledAuthMiddleware(inner)))
