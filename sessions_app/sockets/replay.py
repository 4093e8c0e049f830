"""Sending a stretch of a session's log to one socket: ``RangeSender``, one per
session socket.

``RangeSender.send_range(after, upto)`` sends the logged events ``after <
seq <= upto``: the delivery stage's pages (``delivery.replay.frames``: plain,
or compacted for a socket that compacts), each frame under flow control, and
several to a ``batch`` message for a socket that batches. A hole in the log
closes the socket (1013) rather than being skipped. What it needs of its
socket is ``RangeTarget``.
"""

from __future__ import annotations

from typing import Any, Protocol

from sessions_app.delivery import replay
from sessions_app.delivery.core import Batcher, LogHole, Send
from sessions_app.delivery.flow import Flow
from sessions_app.wire import protocol as p

# A replay on a socket that batches ("batch") sends its frames in messages of
# at most this many frames or characters (and one at least per page read).
BATCH_MAX_FRAMES = 250
BATCH_MAX_CHARS = 256 * 1024


class RangeTarget(Protocol):
    """What a ``RangeSender`` needs of its socket."""

    session_id: str | None
    connection_id: str | None
    compact: bool  # the handshake's "compact": skip superseded stretches
    batching: bool  # the handshake's "batch": several frames to a message
    compacted_through: int  # retention's compacted point, as last read
    flow: Flow
    log: Any

    @property
    def closing(self) -> bool: ...

    async def send(self, text_data: str) -> None: ...

    async def writable(self) -> bool: ...

    async def close_with(self, code: int) -> None: ...


class RangeSender:
    """Sends logged ranges of one session to one socket (see the module)."""

    def __init__(self, socket: RangeTarget) -> None:
        self.socket = socket
        self.batcher: Batcher | None = None

    async def send_range(self, after: int, upto: int, first_page=None, plan=None) -> int:
        """Send the logged events ``after < seq <= upto``; returns the last seq
        sent (short of ``upto`` only if the socket closed meanwhile).

        ``plan``: the superseded stretches to skip (a socket that compacts reads
        it here when none is given), and then ``first_page`` holds the first
        skeleton frames; otherwise ``first_page`` holds the first frames."""
        if plan is None and self.socket.compact:
            plan = await replay.plan_for(
                self.socket.session_id, after, upto, self.socket.compacted_through
            )
            if plan:
                first_page = None
        if self.socket.batching:
            self.batcher = Batcher(BATCH_MAX_FRAMES, BATCH_MAX_CHARS)
        cursor = after
        pages = replay.frames(self.socket.session_id, after, upto, plan, first_page)
        try:
            # The per-frame path of every replay: no coroutine for flow control
            # unless the reader has the limit unread, no lookup twice.
            socket, flow, session_id = self.socket, self.socket.flow, self.socket.session_id
            async for page in pages:
                for step in page:
                    if socket.closing or (flow.pressed() and not await socket.writable()):
                        return cursor
                    if type(step) is Send:
                        await self._emit(step.text)
                        cursor = step.seq
                    else:
                        await self._emit(step.text(session_id))
                        cursor = step.last
                # Sent before the next read, not held behind it.
                await self._flush_batch()
        except LogHole as hole:
            # Purged under this replay, or the session deleted: never skip
            # silently. The client resumes and is told cursor_expired.
            if not self.socket.closing:
                self.socket.log.warning(
                    "connection %s: the log breaks at %s short of %s",
                    self.socket.connection_id,
                    hole.cursor,
                    upto,
                )
                await self.socket.close_with(p.CLOSE_TRY_AGAIN)
        finally:
            await pages.aclose()
            # Before anything else goes out (a presence, a live event): order.
            await self._flush_batch()
            self.batcher = None
        return cursor

    async def _emit(self, text: str) -> None:
        """Send one replayed frame, or add it to the batch under way."""
        if self.batcher is None:
            await self.socket.send(text_data=text)
            return
        full = self.batcher.add(text)
        if full is not None and not self.socket.closing:
            await self.socket.send(text_data=full)

    async def _flush_batch(self) -> None:
        """Send the batch under way as one ``batch`` message."""
        text = self.batcher.flush() if self.batcher is not None else None
        if text is not None and not self.socket.closing:
            await self.socket.send(text_data=text)
