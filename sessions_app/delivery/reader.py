"""One HTTP reader of a session's log, on the delivery stage, in any dialect.

What every streamed response shares (the native SSE stream, the AI SDK's UI
message stream, AG-UI): it joins its groups first (the session's, the user's
rights, the cookie's logout or the token's revocation), reads the head and
epoch once joined (nothing falls between; a log rebuilt meanwhile ends it
with the dialect's reset), replays through ``delivery.replay`` (a hole ends
it, never skipped), then goes live in the ``Sequencer``'s order (no gap, no
repeat at the boundary). What each event, rotation, revocation and read of
the head means is the one delivery driver's (``delivery.driver``), as for
the session socket: this reader is a ``Transport`` of it. Its bytes reach
the response through an ``Outbox``, with a keep-alive whenever a heartbeat
passes with nothing sent. Flow control (``delivery.flow``) comes before
every write, replay and live: a client that reads nothing for
``AGENT_SLOW_CONSUMER_SECONDS`` has its response ended, and holds at most
``AGENT_SEND_BUFFER_BYTES`` of the server's memory meanwhile. The groups
are renewed while it lasts; its per-user slot is given back however it ends.

The bytes are the encoder's (``wire.sse.Encoder``): a dialect is one
encoder in ``wire/`` and a view; this reader is the same for all of them.
An encoder may end the response (``done``: a dialect whose response is one
run, ended at its finish or its gate).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

from sessions_app import fanout
from sessions_app.delivery import reads, replay
from sessions_app.delivery.core import (
    DELETED,
    ROTATED,
    End,
    Follower,
    LogHole,
    Phase,
    check_transition,
)
from sessions_app.delivery.driver import Driver
from sessions_app.delivery.flow import Flow
from sessions_app.delivery.groups import Membership
from sessions_app.delivery.outbox import Outbox
from sessions_app.delivery.standing import head_and_standing, owned_row
from sessions_app.delivery.transport import send_buffer_probe
from sessions_app.log.events import check_resume_cursor
from sessions_app.server.logs import Outage, is_outage
from sessions_app.wire import protocol as p

log = logging.getLogger("sessions_app.delivery.reader")

# A replay writes its events in chunks of about this many bytes.
WRITE_BYTES = 64 * 1024


# A database or channel-layer outage meets every stream at once: one line for many.
_outage = Outage(log)


def _failed(exc: Exception) -> None:
    """A read under the stream failed (PostgreSQL or PgBouncer gone, a Redis
    host lost): the response ends here, cleanly, and its client comes back
    with its cursor (an exception let out of the body would leave the
    connection open and silent, and the client waiting for ever)."""
    if is_outage(exc):
        _outage.error("a stream's read", exc, time.monotonic())
    else:  # not an outage: a bug keeps its traceback
        log.error("a stream failed", exc_info=exc)


@dataclass(frozen=True)
class Follow:
    """What a reader delivers, and on whose standing (``StreamReader``'s
    request): the session's log after ``after`` on ``epoch``; ``granted``
    (the user's id and password hash as it was let in) and its API key
    (``token_id``), or else its cookie's session, must still stand;
    ``compact``: superseded stretches as ``compacted`` (the native stream's
    choice); ``history``: the conversation up to a seq, for an encoder that
    asks (``wants_history``: ``wire.sse.Encoder``)."""

    session_id: str
    after: int
    epoch: str
    granted: tuple[int, str]
    token_id: str | None = None
    compact: bool = False
    history: Callable[[int], Awaitable[Any]] | None = None


class StreamReader:
    """One response's delivery: a reader of one session on the delivery stage,
    its bytes made by ``encoder`` (the dialect: ``wire.sse.Encoder``), its
    steps decided by a ``Follower`` and carried out by the one ``Driver``,
    whose ``Transport`` it is (``emit``, ``emit_range``, ``end``).

    ``phase`` is its one state field (``delivery.core.TRANSITIONS``): OPEN
    until the body starts, REPLAYING, LIVE, CLOSING once anything ended it.
    ``order.last_sent`` is the cursor a reconnect comes back with."""

    def __init__(self, request, follow: Follow, slot, encoder) -> None:
        self.session_id = follow.session_id
        self.granted, self.token_id = follow.granted, follow.token_id
        self.compact, self.history = follow.compact, follow.history
        self.encoder = encoder
        session = getattr(request, "session", None)
        self.session_key = None if follow.token_id or session is None else session.session_key
        # The groups whose messages end it: the session's rotation, the user's
        # rights, and the cookie's logout or the key's revocation.
        self.groups = [fanout.group_name(self.session_id), fanout.rights_group(self.granted[0])]
        if follow.token_id is not None:
            self.groups.append(fanout.token_group(follow.token_id))
        elif self.session_key:
            self.groups.append(fanout.auth_group(self.session_key))
        self.slot = slot
        self.flow = Flow(send_buffer_probe(getattr(request, "scope", {})))
        # Nothing is held: the layer's channel keeps live events meanwhile.
        self.follower = Follower(0, follow.epoch)
        self.order = self.follower.order
        self.order.attach(follow.after)
        self.driver = Driver(self, self.follower)
        self.outbox = Outbox()
        self.phase = Phase.OPEN

    @property
    def closing(self) -> bool:
        return self.phase is Phase.CLOSING

    def to(self, phase: Phase) -> None:
        if check_transition(self.phase, phase):
            self.phase = phase

    async def writable(self) -> bool:
        """Flow control before a write; False (and closing) once the client
        read nothing for the slow-consumer period: it comes back from its cursor."""
        if self.closing:
            return False
        if not self.flow.pressed() or await self.flow.writable(lambda: self.closing):
            return True
        if not self.closing:
            log.info(
                "stream of %s: ending a client that stopped reading (%s bytes unread)",
                self.session_id,
                self.flow.unread(),
            )
            self.to(Phase.CLOSING)
        return False

    def ended(self) -> None:
        """The dialect ended the response (its stream is complete): closing."""
        if self.encoder.done:
            self.to(Phase.CLOSING)

    def reset(self, reason: str, message: str, **extra: Any) -> bytes:
        self.to(Phase.CLOSING)
        return self.encoder.reset(self.session_id, reason, message, **extra)

    async def body(self) -> AsyncIterator[bytes]:
        """The response's bytes: what ``follow`` writes, with a keep-alive
        whenever a heartbeat passes with nothing (``delivery.outbox``)."""
        following = asyncio.ensure_future(self.follow())
        following.add_done_callback(self._followed)
        try:
            async for chunk in self.outbox.chunks(
                settings.AGENT_SSE_HEARTBEAT_SECONDS,
                self.encoder.keep_alive,
                lambda: not self.closing and not self.flow.pressed(),
            ):
                yield chunk
        finally:
            if not self.outbox.ended:  # the client left first: stop following
                following.cancel()
            await asyncio.wait((following,))

    def _followed(self, task: asyncio.Task) -> None:
        """``follow`` is over, however: the response ends (a failure that
        escaped it is logged, never a response left open and silent)."""
        if not task.cancelled() and task.exception() is not None:
            log.error("a stream's reader failed", exc_info=task.exception())
        self.outbox.end()

    async def follow(self) -> None:
        """Join, read the head, replay, then live (see the module); the
        response ends when this does."""
        self.slot.started()
        membership = None
        try:
            if not self.slot.held:  # lapsed: the response was never started in time
                return
            layer = get_channel_layer()
            membership = Membership(layer, await layer.new_channel())
            await membership.join(*self.groups)
            await self.replay()
            if not self.closing:
                self.to(Phase.LIVE)
                await self.live(layer, membership.channel)
        except LogHole as hole:
            try:
                await self.outbox.write(await self.hole(hole.cursor))
            except Exception as exc:
                _failed(exc)
        except Exception as exc:
            _failed(exc)
        finally:
            self.to(Phase.CLOSING)
            self.slot.release()
            if membership is not None:
                await membership.leave_all()
            self.outbox.end()

    async def replay(self) -> None:
        """The head and epoch once joined (what is appended from here on also
        comes live, a repeat dropped by its seq; a rotation before the join
        is seen here), the opening, the log up to that head."""
        state, standing = await head_and_standing(
            self.session_id, self.granted, self.token_id, self.session_key
        )
        steps = self.follower.tail(state, standing)
        if steps and type(steps[0]) is End:
            await self.driver.carry_out(steps)
            return
        head, epoch, _ = state
        await self.outbox.write(self.encoder.opening(self.session_id, epoch, head))
        self.to(Phase.REPLAYING)
        # The replay skips every superseded stretch, however short (as the
        # socket's handshake does); a refill later only a long one.
        plan = None
        if self.compact:
            plan = await reads.replay_plan(self.session_id, self.order.last_sent, head)
        sent = await self.emit_range(self.order.last_sent, head, plan)
        if await self.driver.caught_up(sent):
            await self.caught_up()  # a dialect that ends its response there says so

    async def caught_up(self) -> None:
        """The reader has everything so far: a dialect that ends its response
        there (a run's finish, a gate) ends it."""
        end = self.encoder.caught_up()
        if end:
            await self.outbox.write(end)
        self.ended()

    # --- the driver's transport (``delivery.driver.Transport``) -----------

    async def emit(self, text: str, seq: int) -> bool:
        """One live event (and the conversation so far, for an encoder that
        asks), under flow control."""
        if not await self.writable():
            return False
        chunk = self.encoder.logged(text, seq)
        if self.encoder.wants_history:
            chunk += await self.given_history(seq)
        if chunk:  # an encoder's nothing (another run's event) is no write
            await self.outbox.write(chunk)
        self.ended()
        return True

    async def emit_range(self, after: int, upto: int, plan=None) -> int:
        """The logged events after ``after``, up to ``upto``, under flow
        control (``LogHole`` at a hole); the last seq written. Several events
        to a write, up to ``WRITE_BYTES``: a write costs the server a call
        through Django and daphne, and what a slow reader leaves unread is
        then held in a few large buffers rather than thousands of small ones."""
        cursor = after
        pages = replay.frames(self.session_id, after, upto, plan)
        try:
            async for page in pages:
                out: list[bytes] = []
                size = 0
                for step in page:  # the per-event path of every replay: no call to spare
                    if type(step) is replay.Compacted:
                        chunk = self.encoder.compacted(step.text(self.session_id), step.last)
                    else:
                        chunk = self.encoder.logged(step.text, step.seq)
                        if self.encoder.wants_history:  # AG-UI, after a redo
                            chunk += await self.given_history(step.seq)
                    out.append(chunk)
                    size += len(chunk)
                    done = self.encoder.done
                    if size >= WRITE_BYTES or step is page[-1] or done:
                        if not await self.writable():
                            return cursor
                        if size:
                            await self.outbox.write(b"".join(out))
                        cursor, out, size = replay.last_seq(step), [], 0
                    if done:
                        self.to(Phase.CLOSING)
                        return cursor
        finally:
            await pages.aclose()
        return cursor

    async def end(self, end: End) -> None:
        """Stop following: a reset that says why, or (the standing gone)
        quietly, and the next request is refused."""
        if end is ROTATED:
            message = "the session's log was rebuilt: start again from 0 with the new epoch"
            await self.outbox.write(self.reset(p.R_EPOCH_MISMATCH, message))
        elif end is DELETED:
            await self.outbox.write(self.reset(p.R_NOT_FOUND, "this session no longer exists"))
        else:
            self.to(Phase.CLOSING)

    async def given_history(self, seq: int) -> bytes:
        """The conversation up to ``seq`` for the encoder that asked for it."""
        messages = await self.history(seq) if self.history is not None else None
        return self.encoder.given_history(messages)

    async def hole(self, cursor: int) -> bytes:
        """The log breaks after ``cursor`` (purged under the stream, or the
        session deleted): the reason the client's next request would get."""
        log.warning("stream of %s: the log breaks after %s", self.session_id, cursor)
        row = await owned_row(self.session_id, self.granted[0])
        if row is None:
            return self.reset(p.R_NOT_FOUND, "this session no longer exists")
        try:
            check_resume_cursor(row, cursor, self.follower.epoch, self.compact)
        except p.Rejection as rejection:
            return self.reset(rejection.reason, rejection.message, **rejection.extra)
        # Readable again (a refill raced a purge): the client comes back with its cursor.
        self.to(Phase.CLOSING)
        return self.encoder.keep_alive

    # --- live --------------------------------------------------------------

    async def live(self, layer, channel: str) -> None:
        """Live events, and every heartbeat period a check of the tail and of
        the stream's standing, busy or idle (a key expires with no message).
        Whatever ends the response moves it to CLOSING, which ends the loop."""
        beat = settings.AGENT_SSE_HEARTBEAT_SECONDS
        loop = asyncio.get_running_loop()
        due = loop.time() + beat
        while not self.closing:
            try:
                wait = max(due - loop.time(), 0)
                message = await asyncio.wait_for(layer.receive(channel), wait)
            except TimeoutError:
                message = None
            if loop.time() >= due:
                due = loop.time() + beat
                await self.check_tail()
            if message is not None and not self.closing:
                await self.delivered(message)

    async def check_tail(self) -> None:
        """The head (a publication lost on its way is in the log), the epoch
        and the stream's standing, in one trip to the pool; what it read
        counts as delivered (a gate whose publication was lost ends a
        dialect's response)."""
        state, standing = await head_and_standing(
            self.session_id, self.granted, self.token_id, self.session_key
        )
        await self.driver.tail(state, standing)
        if not self.closing:
            await self.caught_up()

    async def delivered(self, message: dict[str, Any]) -> None:
        """One message of the layer: the log's events, or what ends the stream."""
        kind = message.get("type")
        if kind in (fanout.REVOKED_MESSAGE, fanout.LOGGED_OUT_MESSAGE):
            await self.driver.revoked()
            return
        if message.get("session_id") != self.session_id:
            return
        if kind == fanout.ROTATED_MESSAGE:
            await self.driver.rotated(message.get("epoch"))
            return
        if kind == fanout.EVENTS_MESSAGE:
            events = message["events"]
        elif kind == fanout.EVENT_MESSAGE:
            events = ((message["seq"], message["text"]),)
        else:
            return  # presence, titles: not part of the log
        await self.driver.published(events, holding=False)
        if not self.closing:
            await self.caught_up()
