"""One HTTP reader of a session's log, on the delivery stage, in any dialect.

What every streamed response shares (the native SSE stream, the AI SDK's UI
message stream, AG-UI): it joins its groups first (the session's, the user's
rights, the cookie's logout or the token's revocation), reads the head and
epoch once joined (nothing falls between; a log rebuilt meanwhile ends it
with the dialect's reset), replays through ``delivery.replay`` (a hole ends
it, never skipped), then goes live in the ``Sequencer``'s order (no gap, no
repeat at the boundary). Flow control (``delivery.flow``) comes before
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
from importlib import import_module
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from sessions_app import fanout
from sessions_app.access.rights import still_granted
from sessions_app.delivery import reads, replay
from sessions_app.delivery.core import REPEAT, LogHole, Phase, Sequencer, check_transition
from sessions_app.delivery.flow import Flow
from sessions_app.delivery.groups import Membership
from sessions_app.delivery.transport import send_buffer_probe
from sessions_app.log.events import check_resume_cursor
from sessions_app.models import AgentSession, ApiToken
from sessions_app.server.db_pool import reading_in_db_pool
from sessions_app.server.logs import Outage, is_outage
from sessions_app.wire import protocol as p

log = logging.getLogger("sessions_app.delivery.reader")

ROW = ("epoch", "head", "earliest", "compacted_through")
# A replay writes its events in chunks of about this many bytes.
WRITE_BYTES = 64 * 1024
# Signed-cookie sessions keep no state on the server: a logout cannot be read back.
SIGNED_COOKIES = "django.contrib.sessions.backends.signed_cookies"


@reading_in_db_pool
def owned_row(session_id: str, user_id: int) -> dict[str, Any] | None:
    """The session's epoch, head, earliest and compacted point, if the user owns it."""
    found = AgentSession.objects.filter(id=session_id, owner_id=user_id).values_list(*ROW).first()
    return None if found is None else dict(zip(ROW, found, strict=True))


def _standing(granted: tuple[int, str], token_id: str | None, session_key: str | None) -> bool:
    """May the stream go on? The user's rights as it was let in with them, and
    its key neither revoked nor expired, or its cookie's session still there
    (a logout whose message was lost, a session that expired)."""
    if not still_granted(granted):
        return False
    if token_id is not None:
        live = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        return ApiToken.objects.filter(live, pk=token_id, revoked_at__isnull=True).exists()
    if session_key is not None and settings.SESSION_ENGINE != SIGNED_COOKIES:
        return import_module(settings.SESSION_ENGINE).SessionStore().exists(session_key)
    return True


@reading_in_db_pool
def _state(session_id: str, granted, token_id, session_key):
    """The session's head, epoch and compacted point (None: gone), and whether
    the stream may go on, in one trip to the pool."""
    return reads.head_row(session_id), _standing(granted, token_id, session_key)


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


async def with_keep_alives(
    chunks: AsyncIterator[bytes], beat: float, keep_alive: bytes, wanted: Callable[[], bool]
) -> AsyncIterator[bytes]:
    """``chunks``, and ``keep_alive`` (when ``wanted()``) each time ``beat``
    seconds pass with no chunk, whatever the stream waits on: idle, or a read
    that a database outage holds (PgBouncer queues it until PostgreSQL is
    back). A client's watchdog never takes a waiting server for a dead one."""
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(chunks, None))
            done, _ = await asyncio.wait((pending,), timeout=beat)
            if not done:
                if wanted():
                    yield keep_alive
                continue
            chunk, pending = pending.result(), None
            if chunk is None:
                return
            yield chunk
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.wait((pending,))
        await chunks.aclose()


class StreamReader:
    """One response's delivery: a reader of one session on the delivery stage,
    its bytes made by ``encoder`` (the dialect: ``wire.sse.Encoder``).

    ``phase`` is its one state field (``delivery.core.TRANSITIONS``): OPEN
    until the body starts, REPLAYING, LIVE, CLOSING once anything ended it.
    ``order`` (a ``Sequencer``) holds what was sent: ``order.last_sent`` is
    the cursor a reconnect comes back with."""

    def __init__(self, request, follow: Follow, slot, encoder) -> None:
        self.session_id, self.epoch = follow.session_id, follow.epoch
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
        self.order = Sequencer(0)  # nothing is held: the layer's channel keeps live events
        self.order.attach(follow.after)
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

    def ended(self) -> bool:
        """Has the dialect ended the response (its stream is complete)?"""
        if self.encoder.done:
            self.to(Phase.CLOSING)
        return self.closing

    def reset(self, reason: str, message: str, **extra: Any) -> bytes:
        self.to(Phase.CLOSING)
        return self.encoder.reset(self.session_id, reason, message, **extra)

    def rotated(self) -> bytes:
        return self.reset(
            p.R_EPOCH_MISMATCH,
            "the session's log was rebuilt: start again from 0 with the new epoch",
        )

    def body(self) -> AsyncIterator[bytes]:
        """The response's bytes: the log followed (``follow``), with a
        keep-alive whenever a heartbeat period passes with nothing sent
        (``with_keep_alives``), unless the reader is behind already."""
        return with_keep_alives(
            self.follow(),
            settings.AGENT_SSE_HEARTBEAT_SECONDS,
            self.encoder.keep_alive,
            lambda: not self.closing and not self.flow.pressed(),
        )

    async def follow(self) -> AsyncIterator[bytes]:
        """Join, read the head, replay, then live (see the module)."""
        self.slot.started()
        if not self.slot.held:  # lapsed: the response was never started in time
            return
        layer = get_channel_layer()
        membership = Membership(layer, await layer.new_channel())
        try:
            await membership.join(*self.groups)
            # The head and epoch once joined: what is appended from here on
            # also comes live (a repeat is dropped by its seq), and a rotation
            # before the join is seen here.
            state, standing = await _state(
                self.session_id, self.granted, self.token_id, self.session_key
            )
            if state is None:
                yield self.reset(p.R_NOT_FOUND, "this session no longer exists")
                return
            if not standing:  # revoked, or signed out, before the join
                return
            head, epoch, _ = state
            if epoch != self.epoch:
                yield self.rotated()
                return
            yield self.encoder.opening(self.session_id, epoch, head)
            self.to(Phase.REPLAYING)
            # The replay skips every superseded stretch, however short (as the
            # socket's handshake does); a refill later only a long one.
            plan = None
            if self.compact:
                plan = await reads.replay_plan(self.session_id, self.order.last_sent, head)
            async for chunk in self.log_range(head, plan):
                yield chunk
            if self.closing:
                return
            # Caught up: a dialect that ends its response there says so.
            end = self.encoder.caught_up()
            if end:
                yield end
            if self.ended():
                return
            self.to(Phase.LIVE)
            async for chunk in self.live(layer, membership.channel):
                yield chunk
        except LogHole as hole:
            try:
                yield await self.hole(hole.cursor)
            except Exception as exc:
                _failed(exc)
        except Exception as exc:
            _failed(exc)
        finally:
            self.to(Phase.CLOSING)
            self.slot.release()
            await membership.leave_all()

    async def log_range(self, upto: int, plan=None) -> AsyncIterator[bytes]:
        """The logged events after what was sent, up to ``upto``, under flow
        control (``LogHole`` at a hole). Several events to a write, up to
        ``WRITE_BYTES``: a write costs the server a call through Django and
        daphne, and what a slow reader leaves unread is then held in a few
        large buffers rather than thousands of small ones."""
        pages = replay.frames(self.session_id, self.order.last_sent, upto, plan)
        try:
            async for page in pages:
                out: list[bytes] = []
                size = 0
                for step in page:
                    if isinstance(step, replay.Compacted):
                        out.append(self.encoder.compacted(step.text(self.session_id), step.last))
                    else:
                        out.append(self.encoder.logged(step.text, step.seq))
                        if self.encoder.wants_history:
                            out.append(await self.given_history(step.seq))
                    size += len(out[-1])
                    done = self.encoder.done
                    if size >= WRITE_BYTES or step is page[-1] or done:
                        if not await self.writable():
                            return
                        yield b"".join(out)
                        self.order.sent(replay.last_seq(step))
                        out, size = [], 0
                    if done:
                        self.to(Phase.CLOSING)
                        return
        finally:
            await pages.aclose()

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
            check_resume_cursor(row, cursor, self.epoch, self.compact)
        except p.Rejection as rejection:
            return self.reset(rejection.reason, rejection.message, **rejection.extra)
        # Readable again (a refill raced a purge): the client comes back with its cursor.
        self.to(Phase.CLOSING)
        return self.encoder.keep_alive

    async def live(self, layer, channel: str) -> AsyncIterator[bytes]:
        """Live events, and every heartbeat period a check of the tail and of
        the stream's standing, busy or idle (a key expires with no message;
        the keep-alive while idle is ``body``'s).
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
                async for chunk in self.heartbeat():
                    yield chunk
            if message is not None and not self.closing:
                async for chunk in self.delivered(message):
                    yield chunk

    async def heartbeat(self) -> AsyncIterator[bytes]:
        """The tail check (the keep-alive is ``body``'s); what it read counts
        as delivered: a dialect whose response ends there (a gate whose
        publication was lost) ends."""
        async for chunk in self.check_tail():
            yield chunk
        end = self.encoder.caught_up()
        if end:
            yield end
        self.ended()

    async def delivered(self, message: dict[str, Any]) -> AsyncIterator[bytes]:
        """One message of the layer: the log's events in order (a hole
        refilled from the log first), or what ends the stream."""
        kind = message.get("type")
        if kind in (fanout.REVOKED_MESSAGE, fanout.LOGGED_OUT_MESSAGE):
            self.to(Phase.CLOSING)  # the next request is refused
            return
        if message.get("session_id") != self.session_id:
            return
        if kind == fanout.ROTATED_MESSAGE:
            if message.get("epoch") != self.epoch:
                yield self.rotated()
            return  # else late: the stream began on that epoch
        if kind == fanout.EVENTS_MESSAGE:
            events = message["events"]
        elif kind == fanout.EVENT_MESSAGE:
            events = [(message["seq"], message["text"])]
        else:
            return  # presence, titles: not part of the log
        for seq, text in events:
            before = self.order.before(seq)
            if before is REPEAT:
                continue
            if before is not None:  # a hole: a publication lost or overtaken
                async for chunk in self.log_range(before.upto):
                    yield chunk
            if not await self.writable():
                return
            yield self.encoder.logged(text, seq)
            if self.encoder.wants_history:
                yield await self.given_history(seq)
            self.order.sent(seq)
            if self.ended():
                return
        end = self.encoder.caught_up()
        if end:
            yield end
        self.ended()

    async def check_tail(self) -> AsyncIterator[bytes]:
        """The head (a publication lost on its way is in the log), the epoch
        and the stream's standing, in one trip to the pool."""
        state, standing = await _state(
            self.session_id, self.granted, self.token_id, self.session_key
        )
        if state is None:
            yield self.reset(p.R_NOT_FOUND, "this session no longer exists")
            return
        if not standing:
            self.to(Phase.CLOSING)  # the next request is refused
            return
        head, epoch, _ = state
        if epoch != self.epoch:
            yield self.rotated()
            return
        async for chunk in self.log_range(head):
            yield chunk
