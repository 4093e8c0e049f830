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

The snapshot holds the ``MAX_LISTED`` most recent sessions; where the user
has more it says so (``"truncated": true``).

Only the owner's sessions: the group is per user and every read is filtered
by owner. The socket takes no commands: ``ping`` gets ``pong``, anything else
an ``error`` (``unknown_type``). Everything else is the session socket's
(``sockets.base.AppSocket``): the frame limits (4413 over 64 KiB, 4429 over
the rate), the per-user cap (4429), flow control (4408), group renewal, and
the closes at logout (4401) and when the user's rights end (4403).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from sessions_app import fanout
from sessions_app.access.rights import still_granted
from sessions_app.log.sessions import MAX_LISTED, session_summary, summaries
from sessions_app.models import AgentSession
from sessions_app.server import metrics
from sessions_app.server.db_pool import reading_in_db_pool
from sessions_app.sockets.base import AppSocket
from sessions_app.wire import frames
from sessions_app.wire import protocol as p


def _read_snapshot(user_id: int, granted: tuple[int, str] | None) -> tuple[list[dict], bool | None]:
    """The snapshot (one more than is shown: whether the list was cut short),
    and whether the user still has the rights the socket was let in with."""

    rows = summaries(AgentSession.objects.filter(owner_id=user_id), MAX_LISTED + 1)
    return rows, None if granted is None else still_granted(granted)


# On the pool the session socket's reads use, not Channels' one shared thread.
_snapshot = reading_in_db_pool(_read_snapshot)
summary_in_pool = reading_in_db_pool(session_summary)

# Changes of one session within this long are read once, for every list
# socket of its owner in this process: a run's status flips several times a
# second, and each flip would otherwise cost a read per list socket.
COALESCE_SECONDS = 0.1


class SummaryReads:
    """One read of a session's summary for all the list sockets that want it
    (``wanted``): the first change schedules the read ``COALESCE_SECONDS``
    later, and every change until it starts shares it; a change after it
    started schedules the next."""

    def __init__(self) -> None:
        self.waiting: dict[tuple[str, int], asyncio.Future] = {}

    async def wanted(self, session_id: str, owner_id: int) -> dict[str, Any] | None:
        key = (session_id, owner_id)
        future = self.waiting.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            future = self.waiting[key] = loop.create_future()
            loop.call_later(COALESCE_SECONDS, lambda: asyncio.ensure_future(self._read(key)))
        return await asyncio.shield(future)

    async def _read(self, key: tuple[str, int]) -> None:
        future = self.waiting.pop(key)  # a change from now on reads again
        metrics.LIST_SUMMARIES.inc()
        try:
            future.set_result(await summary_in_pool(*key))
        except Exception as exc:
            future.set_exception(exc)


summary_reads = SummaryReads()


class SessionListConsumer(AppSocket):
    """Pushes the user's session list (its lifecycle, limits and flow control
    are ``AppSocket``'s: the same as the session socket's)."""

    async def authenticated(self) -> None:
        # Joined before the snapshot is read: a change committed after the
        # read is pushed, one before it is in the snapshot.
        await self.join(fanout.user_group(self.user.pk))
        # The rights are read with the snapshot, once their group is joined.
        with contextlib.suppress(Exception):  # a failed join was logged
            await asyncio.shield(self.rights_joined)
        sessions, granted = await _snapshot(self.user.pk, self.rights_to_check(soon=True))
        await self.rights_read(granted)
        if self.closing:
            return
        # Said, not silently cut: the page shows that more exist.
        await self.send_frame(
            frames.session_list(sessions[:MAX_LISTED], len(sessions) > MAX_LISTED)
        )

    async def on_frame(self, text_data: str | None, bytes_data: bytes | None) -> None:
        try:
            frame = p.decode(text_data, bytes_data)
        except p.FrameError as exc:
            await self.send_frame(p.error_frame(exc.code, exc.message, exc.request_id))
            return
        rid = p.request_id_of(frame)
        if frame["type"] == p.PING:
            await self.send_frame(frames.pong(rid))
        else:
            await self.send_frame(
                p.error_frame(p.E_UNKNOWN_TYPE, "the list socket takes no commands", rid)
            )

    async def sessions_changed(self, message: dict[str, Any]) -> None:
        """A session of the user changed: its summary is read (shared, after
        the coalescing window) and pushed, without holding up this socket's
        other messages. A change while that session's push is on its way
        pushes it once more afterwards; more changes meanwhile add nothing."""
        session_id = message.get("session_id")
        if self.user is None or self.closing or not isinstance(session_id, str):
            return
        pushing = self.__dict__.setdefault("pushing", {})
        if session_id in pushing:
            pushing[session_id] = True  # read again once this push is out
            return
        pushing[session_id] = False
        asyncio.ensure_future(self._push(session_id, pushing))

    async def _push(self, session_id: str, pushing: dict[str, bool]) -> None:
        try:
            while not self.closing:
                summary = await summary_reads.wanted(session_id, self.user.pk)
                if summary is None:
                    await self.send_frame(frames.session_gone(session_id))
                else:
                    await self.send_frame(frames.session_changed(summary))
                if not pushing.get(session_id):
                    break
                pushing[session_id] = False
        except Exception:
            # A database blip while reading: closed 1011 (retryable), as a
            # failing handler is; the reconnect's snapshot has it all.
            self.log.exception("connection %s: a list push failed", self.connection_id)
            await self.close_with(p.CLOSE_INTERNAL_ERROR)
        finally:
            pushing.pop(session_id, None)
