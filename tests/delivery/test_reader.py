"""The HTTP reader's keep-alives (sessions_app/delivery/reader.py:
``with_keep_alives``), without a server: a chunk source the test holds.

The drill behind them: PostgreSQL stopped under the chaos suite's SSE
readers, and one stream's read waited for it 6 s with nothing sent, past its
2 s heartbeat, which a client's watchdog takes for a dead server.
"""

from __future__ import annotations

import asyncio

from sessions_app.delivery.reader import with_keep_alives

BEAT = 0.02
KEEP = b": keep-alive\n"


class Source:
    """Chunks the test lets out one at a time: ``release(chunk)``; ``ended``
    once its generator's ``finally`` ran (where the reader gives its slot back)."""

    def __init__(self) -> None:
        self.next: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.ended = asyncio.Event()

    async def chunks(self):
        try:
            while (chunk := await self.next.get()) is not None:
                yield chunk
        finally:
            self.ended.set()


async def test_a_stream_waiting_on_a_read_sends_a_keep_alive_each_beat():
    """While the next chunk is held (a read a database outage holds), a
    keep-alive goes out each heartbeat; the chunk then follows, in order,
    and the end of the source ends the stream."""
    source = Source()
    out = with_keep_alives(source.chunks(), BEAT, KEEP, lambda: True)
    source.next.put_nowait(b"opening")
    assert await anext(out) == b"opening"
    assert [await anext(out) for _ in range(3)] == [KEEP] * 3  # held: three beats
    source.next.put_nowait(b"event 1")
    assert await anext(out) == b"event 1"
    source.next.put_nowait(None)
    assert [chunk async for chunk in out] == []
    assert source.ended.is_set()


async def test_a_busy_stream_sends_no_keep_alive():
    """Chunks coming faster than the heartbeat go out as they are, with no
    keep-alive between them."""
    source = Source()
    for n in range(50):
        source.next.put_nowait(b"%d" % n)
    source.next.put_nowait(None)
    out = with_keep_alives(source.chunks(), 10.0, KEEP, lambda: True)
    assert [chunk async for chunk in out] == [b"%d" % n for n in range(50)]


async def test_no_keep_alive_for_a_reader_that_is_behind():
    """``wanted()`` false (the reader has the limit unread, or the stream is
    closing): a beat passes with nothing added to what it has not read."""
    source = Source()
    wanted = asyncio.Event()

    def want() -> bool:
        if not wanted.is_set():
            wanted.set()  # asked, and refused: the beat passed
            return False
        return True

    out = with_keep_alives(source.chunks(), BEAT, KEEP, want)
    source.next.put_nowait(b"opening")
    assert await anext(out) == b"opening"
    assert await anext(out) == KEEP  # only after a refused beat
    assert wanted.is_set()
    await out.aclose()


async def test_a_client_gone_mid_wait_ends_the_source():
    """The response closed while a read is held: the held read is cancelled
    and the source's ``finally`` runs (its slot and groups given back)."""
    source = Source()
    out = with_keep_alives(source.chunks(), BEAT, KEEP, lambda: True)
    source.next.put_nowait(b"opening")
    assert await anext(out) == b"opening"
    assert await anext(out) == KEEP
    await out.aclose()
    assert source.ended.is_set()
