"""Sending a stretch of a session's log to one socket: pages, batches, and
compacted replays (``SessionConsumer``'s, in a class of its own).

``ReplaySender._send_range(after, upto)`` sends the logged events ``after <
seq <= upto``: read in pages on the sockets' pool (``socket_db``), each frame
under flow control, several to a ``batch`` message for a socket that batches,
and with superseded stretches replaced by one ``compacted`` frame for a socket
that compacts. A hole in the log closes the socket (1013) rather than being
skipped. What to send and in what order is the delivery core's
(``delivery.Batcher``, ``contiguous``, ``interleave``); this class reads the
pages and sends. The class it is mixed into provides the socket:
``session_id``, ``closing``, ``compact``, ``batching``, ``compacted_through``,
``send``, ``_writable``, ``_close`` and ``log``.
"""

from __future__ import annotations

from sessions_app.sockets import queries as db
from sessions_app.sockets.delivery import (
    Batcher,
    Compacted,
    LogHole,
    Refill,
    contiguous,
    interleave,
)
from sessions_app.wire import protocol as p

# A range this short is sent whole even to a socket that compacts: looking for
# what it could skip would cost a query on a path (refills) that is usually
# a few events long.
COMPACT_MIN_EVENTS = 64
# A replay on a socket that batches ("batch") sends its frames in messages of
# at most this many frames or characters (and one at least per page read).
BATCH_MAX_FRAMES = 250
BATCH_MAX_CHARS = 256 * 1024


class ReplaySender:
    """Sends logged ranges of one session to one socket (see the module)."""

    batcher: Batcher | None = None

    async def _send_range(self, after: int, upto: int, first_page=None, plan=None) -> int:
        """Send the logged events ``after < seq <= upto``; returns the last seq
        sent (short of ``upto`` only if the socket closed meanwhile).

        ``plan``: the superseded stretches to skip (a socket that compacts reads
        it here when none is given), and then ``first_page`` holds the first
        skeleton frames; otherwise ``first_page`` holds the first frames."""
        short = upto - after <= COMPACT_MIN_EVENTS and after >= self.compacted_through
        if plan is None and self.compact and not short:
            plan = await db.replay_plan(self.session_id, after, upto)
            first_page = None
        if self.batching:
            self.batcher = Batcher(BATCH_MAX_FRAMES, BATCH_MAX_CHARS)
        try:
            if not plan:
                return await self._send_frames(after, upto, first_page)
            return await self._send_compacted(after, upto, plan, first_page)
        finally:
            # Before anything else goes out (a presence, a live event): order.
            await self._flush_batch()
            self.batcher = None

    async def _emit(self, text: str) -> None:
        """Send one replayed frame, or add it to the batch under way."""
        if self.batcher is None:
            await self.send(text_data=text)
            return
        full = self.batcher.add(text)
        if full is not None and not self.closing:
            await self.send(text_data=full)

    async def _flush_batch(self) -> None:
        """Send the batch under way as one ``batch`` message."""
        text = self.batcher.flush() if self.batcher is not None else None
        if text is not None and not self.closing:
            await self.send(text_data=text)

    async def _send_compacted(self, after: int, upto: int, plan, first_page=None) -> int:
        """A compacted replay: the skeleton's frames read in pages (through its
        index), and between two of them either one ``compacted`` frame (a
        superseded stretch) or the deltas that are kept, read as a range. A
        replay of a long finished session so costs a few queries, not one per
        stretch."""
        superseded = {first: (last, run_id) for first, last, run_id in plan}
        cursor = after
        page = first_page
        while cursor < upto and not self.closing:
            if page is None:
                page = await db.skeleton_page(self.session_id, cursor, upto)
            if not page:  # deltas to the end (a run still streaming), or nothing
                return await self._send_frames(cursor, upto)
            for step in interleave(cursor, page, superseded):
                if isinstance(step, Refill):
                    await self._flush_batch()  # not held behind the read
                    cursor = await self._send_frames(step.after, step.upto)
                    if cursor < step.upto:
                        return cursor
                    continue
                if self.closing or not await self._writable():
                    return cursor
                if isinstance(step, Compacted):
                    await self._emit(step.text(self.session_id))
                    cursor = step.last
                else:
                    await self._emit(step.text)
                    cursor = step.seq
            page = None
            # Sent before the next read, not held behind it.
            await self._flush_batch()
        return cursor

    async def _send_frames(self, after: int, upto: int, first_page=None) -> int:
        """Send every logged event ``after < seq <= upto``, paged; a hole in the
        log closes the socket (1013) rather than being skipped."""
        cursor = after
        while cursor < upto and not self.closing:
            if first_page is not None:
                page, first_page = first_page, None
            else:
                page = await db.events_page(self.session_id, cursor, upto)
            if not page:
                # Short of what was committed (the session was deleted, or the
                # log purged): never send past a hole; the client resumes and is
                # told what happened.
                if not self.closing:
                    self.log.warning(
                        "connection %s: log ends at %s short of %s",
                        self.connection_id,
                        cursor,
                        upto,
                    )
                    await self._close(p.CLOSE_TRY_AGAIN)
                return cursor
            try:
                for step in contiguous(cursor, page):
                    if self.closing or not await self._writable():
                        return cursor
                    await self._emit(step.text)
                    cursor = step.seq
            except LogHole:
                # Purged under this replay (purge_events): never skip silently.
                # The client resumes and is told cursor_expired.
                self.log.warning(
                    "connection %s: log purged under a replay at %s", self.connection_id, cursor
                )
                await self._close(p.CLOSE_TRY_AGAIN)
                return cursor
            await self._flush_batch()
        return cursor
