"""An HTTP reader's bytes on their way to its response: ``Outbox``.

The delivery driver pushes (``delivery.driver``: the same driver as the
socket's); a streamed response pulls. ``Outbox`` joins the two: the
reader's task ``write``s a chunk and goes on once the response wrote it (the
reader's pace is its client's, and what was sent is what went out), and the
response iterates ``chunks``. A keep-alive goes out whenever a heartbeat
passes with no chunk, idle or waiting on anything: a read that a database
outage holds (PgBouncer queues it until PostgreSQL is back) never makes a
stream silent past its heartbeat, which a client's watchdog would take for a
dead server (the chaos suite's ``database`` phase saw one silent 5.96 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable


class Outbox:
    """Chunks from one writer to one response (see the module)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.ended = False  # ``end`` was called: the response ends after what it has

    async def write(self, chunk: bytes) -> None:
        """Hand ``chunk`` over; returns once the response has written it."""
        self.queue.put_nowait(chunk)
        await self.queue.join()

    def end(self) -> None:
        """Nothing more comes: the response ends after what it was given
        (once; a second call changes nothing)."""
        if not self.ended:
            self.ended = True
            self.queue.put_nowait(None)

    async def chunks(
        self, beat: float, keep_alive: bytes, wanted: Callable[[], bool]
    ) -> AsyncIterator[bytes]:
        """What was written, in order, until ``end``; ``keep_alive`` (when
        ``wanted()``: not for a reader with the limit unread) each time
        ``beat`` seconds pass with nothing."""
        queue = self.queue
        while True:
            try:
                async with asyncio.timeout(beat):
                    chunk = await queue.get()
            except TimeoutError:
                if wanted():
                    yield keep_alive
                continue
            if chunk is not None:
                yield chunk
            queue.task_done()
            if chunk is None:
                return
