"""The one driver of delivery: what the core decides, carried out on any
transport.

``delivery.core.Follower`` decides, as pure code, what each thing that
happens means to one reader of a session: an event published live, a
rotation, a revocation, a read of the session's head. ``Driver`` asks it and
carries its steps out, in order, one sender at a time, on a ``Transport``:
the session socket (``sockets.session.SessionConsumer``) or an HTTP response
in any dialect (``delivery.reader.StreamReader``). What differs by transport
is only how a step is said:

- ``emit(text, seq)``: one logged event (a socket frame; SSE bytes in the
  dialect's encoding);
- ``emit_range(after, upto)``: the log's events after the cursor (a socket
  batches them and closes 1013 at a hole; a response writes them in large
  chunks and ends with its dialect's reset at a hole);
- ``end(End)``: stop following (a socket closes 1013 or 4403; a response
  ends with ``reset`` or quietly).

Flow control comes before each write, in the transport (``delivery.flow``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Protocol

from sessions_app.delivery.core import End, Follower, Refill, Send, Sequencer, Step


class Transport(Protocol):
    """What a ``Driver`` needs of the reader it drives."""

    @property
    def closing(self) -> bool: ...

    async def emit(self, text: str, seq: int) -> bool:
        """One logged event, under flow control; False if it did not go out
        (the reader closed, or stopped reading)."""
        ...

    async def emit_range(self, after: int, upto: int) -> int:
        """The logged events ``after < seq <= upto``; the last seq sent (short
        of ``upto`` only if the reader closed meanwhile)."""
        ...

    async def end(self, end: End) -> None:
        """Stop following, for ``end.reason``, the transport's way."""
        ...


class Driver:
    """Carries out one reader's ``Follower`` on its ``Transport`` (see the
    module). ``lock``: one sender at a time (live delivery, a replay's drain,
    a tail refill and a socket's ``sync`` all move the order)."""

    def __init__(self, transport: Transport, follower: Follower) -> None:
        self.transport = transport
        self.follower = follower
        self.lock = asyncio.Lock()

    @property
    def order(self) -> Sequencer:
        return self.follower.order

    async def published(self, events: Iterable[tuple[int, str]], holding: bool) -> bool:
        """Events published live, in seq order (held while a replay runs);
        whether any step was carried out."""
        if holding:
            self.follower.published(events, True)
            return False
        async with self.lock:
            if self.transport.closing:
                return False
            steps = self.follower.published(events, False)
            await self.carry_out(steps)
        return bool(steps)

    async def caught_up(self, sent: int) -> bool:
        """A replay sent up to ``sent``: the events held meanwhile go out in
        order, until none is held (more may arrive while they do). Whether the
        reader is still open, and may go live."""
        self.order.sent(sent)
        while not self.transport.closing:
            async with self.lock:
                steps = self.follower.drained()
                if not steps:
                    break
                await self.carry_out(steps)
        return not self.transport.closing

    async def rotated(self, epoch: str | None) -> bool:
        """The session's epoch is ``epoch`` now: whether that ended the reader."""
        steps = self.follower.rotated(epoch)
        await self.carry_out(steps)
        return bool(steps)

    async def revoked(self) -> None:
        """The reader's standing ended (a message of its rights' groups)."""
        await self.carry_out(self.follower.revoked())

    async def tail(
        self,
        head: tuple[int, str, int] | None,
        standing: bool | None,
        refilling: Callable[[Refill], None] | None = None,
    ) -> Refill | None:
        """A read of the head (and of the standing, if it was asked): the end,
        or the events committed but never published, refilled (``refilling``
        is told first). The refill, if there was one (a lost publication: a
        socket renews its groups)."""
        steps = self.follower.tail(head, standing)
        if not steps or type(steps[0]) is not Refill:
            await self.carry_out(steps)
            return None
        async with self.lock:  # live delivery may have caught up meanwhile
            steps = self.follower.tail(head, standing)
            if steps and refilling is not None:
                refilling(steps[0])
            await self.carry_out(steps)
        return steps[0] if steps else None

    async def carry_out(self, steps: list[Step]) -> None:
        """Each step in order; a write that did not go out, a refill that came
        back short or an end stops it. Under ``lock`` when it sends."""
        transport, order = self.transport, self.order
        for step in steps:
            if transport.closing:
                return
            kind = type(step)
            if kind is Send:
                if not await transport.emit(step.text, step.seq):
                    return
                order.sent(step.seq)
            elif kind is Refill:
                order.sent(await transport.emit_range(step.after, step.upto))
            else:
                await transport.end(step)
                return
