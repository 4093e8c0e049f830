"""The one delivery driver (sessions_app/delivery/driver.py) over the pure
``Follower`` (delivery/core.py), with a fake transport: every delivery
invariant of every transport, tested once here.

``Reader`` is a transport whose log is seqs 1..head; it records what its
client received, which each test checks exactly, and how it ended.
"""

from __future__ import annotations

import asyncio

from sessions_app.delivery.core import DELETED, REVOKED, ROTATED, End, Follower
from sessions_app.delivery.driver import Driver


def text(seq: int) -> str:
    return f"e{seq}"


class Reader:
    """A fake ``Transport``: ``received`` the client's seqs, ``ended`` how it
    ended; ``stops_after``: it stops reading once it holds that many;
    ``range_gate``: a range waits for it (a slow read of the log)."""

    def __init__(self, head: int, stops_after: int | None = None) -> None:
        self.head = head
        self.received: list[int] = []
        self.ended: End | None = None
        self.stops_after = stops_after
        self.range_gate: asyncio.Event | None = None

    @property
    def closing(self) -> bool:
        return self.ended is not None

    async def emit(self, text_: str, seq: int) -> bool:
        if self.stops_after is not None and len(self.received) >= self.stops_after:
            self.ended = End("slow")  # as the flow control closes it
            return False
        assert text_ == text(seq)
        self.received.append(seq)
        return True

    async def emit_range(self, after: int, upto: int) -> int:
        if self.range_gate is not None:
            await self.range_gate.wait()
        for seq in range(after + 1, min(upto, self.head) + 1):
            if not await self.emit(text(seq), seq):
                return seq - 1
        return min(upto, self.head)

    async def end(self, end: End) -> None:
        self.ended = end


def driven(head: int, after: int = 0, epoch: str = "E1", **kw) -> tuple[Reader, Driver]:
    reader = Reader(head, **kw)
    follower = Follower(buffer_limit=3, epoch=epoch)
    follower.order.attach(after)
    return reader, Driver(reader, follower)


async def replayed(reader: Reader, driver: Driver, upto: int) -> bool:
    """A replay as a transport runs it: the range, then what was held."""
    return await driver.caught_up(await reader.emit_range(driver.order.last_sent, upto))


async def test_replay_then_live_has_no_gap_and_no_repeat():
    """Events published while the replay runs are held, then sent after it
    in order, a repeat of the replay dropped and what overflowed the buffer
    read from the log; live events then follow one by one."""
    reader, driver = driven(head=12, after=2)
    reader.head = 5  # the replay's head; 6.. are committed while it runs
    for seq in [5, 6, 7, 8, 9, 10]:  # 5 repeats the replay; past 3 held: overflow
        assert not await driver.published([(seq, text(seq))], holding=True)
    reader.head = 12
    assert await replayed(reader, driver, 5)
    assert await driver.published([(11, text(11))], holding=False)
    assert not await driver.published([(11, text(11))], holding=False)  # a repeat
    assert await driver.published([(12, text(12))], holding=False)
    assert reader.received == list(range(3, 13))


async def test_a_hole_in_live_delivery_is_refilled_from_the_log():
    """A publication lost or overtaken: the next event is sent only after
    the missing ones, read from the log."""
    reader, driver = driven(head=9, after=4)
    await driver.published([(8, text(8)), (9, text(9))], holding=False)
    assert reader.received == [5, 6, 7, 8, 9]


async def test_a_tail_read_refills_what_was_committed_but_not_published():
    """A publication lost at the end of a burst: the tail read finds the head
    ahead and refills to it, said before it goes out (a test of the server
    reads that line once its tab has the events); a read that finds nothing
    new sends nothing."""
    reader, driver = driven(head=7, after=4)
    told: list[tuple[int, int, int]] = []
    refill = await driver.tail(
        (7, "E1", 0), None, lambda r: told.append((r.after, r.upto, len(reader.received)))
    )
    assert (refill.after, refill.upto) == (4, 7)
    assert told == [(4, 7, 0)]
    assert await driver.tail((7, "E1", 0), True) is None
    assert reader.received == [5, 6, 7] and reader.ended is None


async def test_a_tail_refill_racing_live_delivery_sends_each_seq_once():
    """The tail check reads without the lock; live delivery goes on
    meanwhile. The refill is decided again under the lock, so nothing is
    sent twice."""
    reader, driver = driven(head=6, after=3)
    reader.range_gate = asyncio.Event()
    held = asyncio.ensure_future(driver.published([(6, text(6))], holding=False))
    await asyncio.sleep(0)  # sleep-ok: one turn, for the delivery to take the lock
    tail = asyncio.ensure_future(driver.tail((6, "E1", 0), None))
    reader.range_gate.set()
    await asyncio.gather(held, tail)
    assert reader.received == [4, 5, 6]


async def test_rotation_ends_the_reader_and_a_late_message_does_not():
    """The log rebuilt (a new epoch, by its message or a read of the head)
    ends the reader as ROTATED; a message for the epoch it follows is late."""
    reader, driver = driven(head=3)
    assert not await driver.rotated("E1")
    assert reader.ended is None
    assert await driver.rotated("E2")
    assert reader.ended is ROTATED
    reader, driver = driven(head=3)
    await driver.tail((3, "E2", 0), None)
    assert reader.ended is ROTATED and reader.received == []


async def test_a_deleted_session_and_a_revoked_standing_end_the_reader():
    """A tail read that finds no session ends it DELETED; one that finds the
    standing gone (whatever else it found), or a revocation's message,
    REVOKED; nothing is sent."""
    reader, driver = driven(head=3)
    await driver.tail(None, True)
    assert reader.ended is DELETED
    reader, driver = driven(head=3)
    await driver.tail((3, "E1", 0), False)
    assert reader.ended is REVOKED
    reader, driver = driven(head=3)
    await driver.tail(None, False)  # both: the rights gone say more (a socket's 4403)
    assert reader.ended is REVOKED
    reader, driver = driven(head=3)
    await driver.revoked()
    assert reader.ended is REVOKED
    await driver.published([(1, text(1))], holding=False)
    assert reader.received == []


async def test_a_reader_that_stops_reading_is_ended_where_it_stopped():
    """Flow control refuses a write: the driver stops there, its cursor is
    what went out, and nothing after it is sent."""
    reader, driver = driven(head=10, stops_after=4)
    await driver.published([(10, text(10))], holding=False)
    assert reader.received == [1, 2, 3, 4]
    assert driver.order.last_sent == 4
    assert not await replayed(reader, driver, 10)
