"""The WebSocket of the session list page, ``/ws/list/``: live updates by push.

The page renders the list once; this socket keeps it current. On connect it
sends the user's sessions (``{"type": "sessions", "sessions": [...]}``, the
same fields the page shows), then, whenever something the list shows changes
(a new session, a title, a run starting or ending, an approval waiting or
decided), that session again (``{"type": "session", "session": {...}}``), or
``{"type": "session_gone", "session_id"}`` once it is deleted. Changes arrive
through the user's channel-layer group (``fanout.user_group``), published
after the transactions that made them commit; a reconnect gets a fresh
snapshot, so nothing missed while away stays missing.

Only the owner's sessions: the group is per user and every read is filtered
by owner. The socket takes no commands: ``ping`` gets ``pong``, anything else
an ``error`` (``unknown_type``); the frame limits of the session socket apply
(4413 over 64 KiB, 4429 over the rate).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer

from . import fanout
from . import protocol as p
from .auth import user_of
from .db_pool import reading_in_db_pool
from .services import MAX_LISTED, session_summary, summaries

log = logging.getLogger(__name__)


def _read_snapshot(user_id: int) -> list[dict]:
    from .models import AgentSession

    return summaries(AgentSession.objects.filter(owner_id=user_id), MAX_LISTED)


# On the pool the session socket's reads use, not Channels' one shared thread.
_snapshot = reading_in_db_pool(_read_snapshot)
_summary = reading_in_db_pool(session_summary)


class SessionListConsumer(AsyncWebsocketConsumer):
    """Pushes the user's session list."""

    async def connect(self) -> None:
        self.user = None
        self.group: str | None = None
        self.auth_group: str | None = None
        self.bucket = p.TokenBucket()
        await self.accept()
        # The cookie's group first: a logout during the lookup reaches this socket.
        self.auth_group = fanout.scope_auth_group(self.scope)
        if self.auth_group:
            await self.channel_layer.group_add(self.auth_group, self.channel_name)
        # Looked up while the upgrade was answered, bounded (a slow database
        # is a retryable close, as on the session socket).
        try:
            self.user = await user_of(self.scope)
        except TimeoutError:
            await self.close(code=p.CLOSE_TRY_AGAIN)
            return
        except Exception:
            log.exception("list socket: the user lookup failed")
            await self.close(code=p.CLOSE_INTERNAL_ERROR)
            return
        if self.user is None or not self.user.is_authenticated:
            await self.close(code=p.CLOSE_NOT_AUTHENTICATED)
            return
        # Joined before the snapshot is read: a change committed after the
        # read is pushed, one before it is in the snapshot.
        self.group = fanout.user_group(self.user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self._send({"type": "sessions", "sessions": await _snapshot(self.user.pk)})

    async def disconnect(self, code: int) -> None:
        try:
            if self.group is not None:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            if self.auth_group:
                await self.channel_layer.group_discard(self.auth_group, self.channel_name)
        except Exception:
            log.exception("list socket: could not leave its groups")

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None):
        raw = text_data if text_data is not None else bytes_data or b""
        if len(raw.encode() if isinstance(raw, str) else raw) > p.MAX_FRAME_BYTES:
            await self.close(code=p.CLOSE_TOO_LARGE)
            return
        if not self.bucket.take(time.monotonic()):
            await self.close(code=p.CLOSE_RATE_LIMITED)
            return
        try:
            frame = p.decode(text_data, bytes_data)
        except p.FrameError as exc:
            await self._send(p.error_frame(exc.code, exc.message, exc.request_id))
            return
        rid = p.request_id_of(frame)
        if frame["type"] == p.PING:
            await self._send({"type": p.PONG, "request_id": rid})
        else:
            await self._send(
                p.error_frame(p.E_UNKNOWN_TYPE, "the list socket takes no commands", rid)
            )

    async def sessions_changed(self, message: dict[str, Any]) -> None:
        session_id = message.get("session_id")
        if self.group is None or not isinstance(session_id, str):
            return
        summary = await _summary(session_id, self.user.pk)
        if summary is None:
            await self._send({"type": "session_gone", "session_id": session_id})
        else:
            await self._send({"type": "session", "session": summary})

    async def auth_logged_out(self, message: dict[str, Any]) -> None:
        """The cookie this socket was opened with was signed out."""
        await self.close(code=p.CLOSE_NOT_AUTHENTICATED)

    async def _send(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=fanout.dumps(frame))
