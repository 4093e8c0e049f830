"""An HTTP reader's outbox (sessions_app/delivery/outbox.py): chunks from
the driver to the response, and keep-alives while it waits, without a server.

The drill behind the keep-alives: PostgreSQL stopped under the chaos suite's
SSE readers, and one stream's read waited for it 6 s with nothing sent, past
its 2 s heartbeat, which a client's watchdog takes for a dead server.
"""

from __future__ import annotations

import asyncio

from sessions_app.delivery.outbox import Outbox

BEAT = 0.02
KEEP = b": keep-alive\n"


async def test_a_reader_waiting_on_a_read_sends_a_keep_alive_each_beat():
    """While the writer is held (a read a database outage holds), a keep-alive
    goes out each heartbeat; what it writes then follows, in order, and its
    end ends the response."""
    box = Outbox()
    out = box.chunks(BEAT, KEEP, lambda: True)
    wrote = asyncio.ensure_future(box.write(b"opening"))
    assert await anext(out) == b"opening"
    assert [await anext(out) for _ in range(3)] == [KEEP] * 3  # held: three beats
    assert wrote.done()
    box.end()
    assert [chunk async for chunk in out] == []


async def test_a_write_returns_once_the_response_wrote_it():
    """``write`` returns only once the response took the chunk and asked for
    the next: the reader's pace is its client's, and what it counts as sent
    went out."""
    box = Outbox()
    out = box.chunks(10.0, KEEP, lambda: True)
    wrote = asyncio.ensure_future(box.write(b"1"))
    assert await anext(out) == b"1"
    await asyncio.sleep(0)  # sleep-ok: one turn of the loop, for the writer to run
    assert not wrote.done()  # taken, not yet written
    box.end()
    assert [chunk async for chunk in out] == []
    await wrote


async def test_a_busy_reader_sends_no_keep_alive():
    """Chunks coming faster than the heartbeat go out as they are, with no
    keep-alive between them."""
    box = Outbox()

    async def writer() -> None:
        for n in range(50):
            await box.write(b"%d" % n)
        box.end()

    task = asyncio.ensure_future(writer())
    assert [chunk async for chunk in box.chunks(10.0, KEEP, lambda: True)] == [
        b"%d" % n for n in range(50)
    ]
    await task


async def test_no_keep_alive_for_a_reader_that_is_behind():
    """``wanted()`` false (the reader has the limit unread, or it is closing):
    a beat passes with nothing added to what it has not read."""
    box = Outbox()
    asked = asyncio.Event()

    def wanted() -> bool:
        if not asked.is_set():
            asked.set()  # asked, and refused: that beat passed with nothing
            return False
        return True

    out = box.chunks(BEAT, KEEP, wanted)
    assert await anext(out) == KEEP  # only after a refused beat
    assert asked.is_set()
    await out.aclose()
