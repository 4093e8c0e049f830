"""May an HTTP reader go on? Its standing, read with the session's head.

A stream is let in with its user's rights (``granted``: the id and password
hash) and an API key or a cookie's session. Each heartbeat it reads, in one
trip to the sockets' pool, the session's head and epoch (``reads.head_row``)
and whether that standing still holds: the rights unchanged, the key
neither revoked nor expired, the cookie's session still there (a logout
whose message was lost, a session that expired). ``owned_row`` is the
session's row for a request and a hole's reason.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from sessions_app.access.rights import still_granted
from sessions_app.delivery import reads
from sessions_app.models import AgentSession, ApiToken
from sessions_app.server.db_pool import reading_in_db_pool

ROW = ("epoch", "head", "earliest", "compacted_through")
# Signed-cookie sessions keep no state on the server: a logout cannot be read back.
SIGNED_COOKIES = "django.contrib.sessions.backends.signed_cookies"


@reading_in_db_pool
def owned_row(session_id: str, user_id: int) -> dict[str, Any] | None:
    """The session's epoch, head, earliest and compacted point, if the user owns it."""
    found = AgentSession.objects.filter(id=session_id, owner_id=user_id).values_list(*ROW).first()
    return None if found is None else dict(zip(ROW, found, strict=True))


def standing(granted: tuple[int, str], token_id: str | None, session_key: str | None) -> bool:
    """May the stream go on? The user's rights as it was let in with them, and
    its key neither revoked nor expired, or its cookie's session still there
    (a logout whose message was lost, a session that expired)."""
    if not still_granted(granted):
        return False
    if token_id is not None:
        live = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        return ApiToken.objects.filter(live, pk=token_id, revoked_at__isnull=True).exists()
    if session_key is not None and settings.SESSION_ENGINE != SIGNED_COOKIES:
        return import_module(settings.SESSION_ENGINE).SessionStore().exists(session_key)
    return True


@reading_in_db_pool
def head_and_standing(session_id: str, granted, token_id, session_key):
    """The session's head, epoch and compacted point (None: gone), and whether
    the stream may go on, in one trip to the pool."""
    return reads.head_row(session_id), standing(granted, token_id, session_key)
