"""The WebSocket endpoint ``/ws/sessions/``: protocol version 1, server side.

One consumer per socket. Before its handshake a socket may only ``start`` or
``resume``; afterwards it follows one session: replay after the client's cursor,
then live events from the session's channel-layer group, each socket receiving
``after+1, after+2, …`` with no gap and no repeat.

How the boundary is kept: the socket joins the group *before* it reads the log,
so nothing committed after the read can be missed. The replay runs as a task
while live group messages are parked in memory (the channel layer's queue
keeps draining, so a long replay never overflows it). Live delivery then drops
what is at or below the last sent seq and refills any hole from the log (a
hole means a publication was lost or overtaken: seqs commit in order, so the
missing events are already readable). In the steady state a live event costs
no database query. Those decisions are the pure ``delivery.core.Follower``'s,
carried out by ``delivery.driver.Driver``, as for every HTTP reader: this
socket is its ``Transport`` (``emit``, ``emit_range``, ``end``).

Flow control, limits and the socket's lifecycle are ``sockets.base.AppSocket``'s
(its base class). The rest are small objects the consumer holds, each behind
the narrow interface it declares (a ``Protocol``): ``ranges`` sends logged
ranges (``sockets.replay.RangeSender``: pages, batches, compacted stretches),
``tail`` refills a publication lost at the end of a burst
(``sockets.tail.TailCheck``), ``commands`` answers each command frame
(``sockets.commands.Commands``). The handshake's progress is the socket's
``phase``: OPEN until a handshake is answered, then REPLAYING and LIVE.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.conf import settings
from django.utils.timezone import now

from sessions_app import fanout
from sessions_app.access.rights import RightsRevoked
from sessions_app.delivery import transport
from sessions_app.delivery.core import REVOKED, End, Follower, Phase
from sessions_app.delivery.driver import Driver
from sessions_app.models import new_connection_id
from sessions_app.server import metrics, tracing
from sessions_app.server.identity import worker_id
from sessions_app.sockets import queries as db
from sessions_app.sockets import rows
from sessions_app.sockets.base import AppSocket
from sessions_app.sockets.commands import Commands, error_frame_for
from sessions_app.sockets.replay import RangeSender
from sessions_app.sockets.tail import TailCheck
from sessions_app.wire import frames
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import SessionError

# The phases of a socket that follows a session: its handshake was answered.
FOLLOWING = (Phase.REPLAYING, Phase.LIVE)
# Live events held in memory while a replay is sent; past this a socket that
# replays slowly costs the log a read, not the server its memory.
LIVE_BUFFER_LIMIT = 1000


class SessionConsumer(AppSocket):
    """Speaks the session protocol on one socket (its lifecycle, limits and
    flow control are ``AppSocket``'s)."""

    # What ``cleanup`` stops exists from the start, whatever a close interrupted.
    handshake_deadline: asyncio.TimerHandle | None = None
    replay_task: asyncio.Task | None = None

    async def connect(self) -> None:
        fanout.publisher.attach(asyncio.get_running_loop())
        # What delivery decides (the order: last sent seq, live events held
        # during a replay; the epoch followed), and its one driver; its
        # lock: one sender at a time (live delivery, the replay's drain, sync
        # and the tail check, which runs outside the message loop).
        self.follower = Follower(LIVE_BUFFER_LIMIT)
        self.driver = Driver(self, self.follower)
        self.replay_task: asyncio.Task | None = None
        # The handshake's "compact" feature: replays skip superseded stretches.
        self.compact = False
        # The handshake's "batch" feature: replayed frames go out several to a
        # message (``ranges.batcher`` holds those not sent yet).
        self.batching = False
        # Sends the logged ranges: the replay, refills, syncs.
        self.ranges = RangeSender(self)
        # The handshake's "interrupt" feature: said back, so the client knows a
        # send's "interrupt" is honoured (it is on every socket).
        self.interrupt = False
        # The handshake's "branches" feature: said back likewise (regenerate,
        # edit_of and switch work on every socket).
        self.branches = False
        # Retention deleted superseded deltas up to here (as last read): a
        # compacting replay from before it must skip, however short.
        self.compacted_through = 0
        self.pending_presence: dict[str, Any] | None = None
        self.last_ack = 0
        # The head re-read after the last live event, and while idle.
        self.tail = TailCheck(self)
        # What each command frame does, once the handshake was answered.
        self.commands = Commands(self)
        self.handshake_deadline: asyncio.TimerHandle | None = None
        self.opened_at = now()
        await super().connect()

    async def authenticated(self) -> None:
        # The handshake waits for no write: the diagnostic row is written
        # after its answer (``_record``; at the close if none came), so that
        # the write does not compete with the handshake for the pool and the GIL.
        # The access log's (``AppSocket.connect`` took it), or one of its own.
        self.connection_id = self.connection_id or new_connection_id()
        self.opened = {
            "user_id": self.user.pk,
            "server_id": worker_id(),
            "opened_at": self.opened_at,
        }
        self.recorded: asyncio.Future | None = None
        self.handshake_deadline = asyncio.get_running_loop().call_later(
            p.HANDSHAKE_TIMEOUT_SECONDS, self._handshake_timeout
        )

    def _handshake_timeout(self) -> None:
        if self.phase is Phase.OPEN:
            self.log.info(
                "connection %s: no handshake within %s s: closing 4400",
                self.connection_id,
                p.HANDSHAKE_TIMEOUT_SECONDS,
            )
            asyncio.ensure_future(self.close_with(p.CLOSE_PROTOCOL_VIOLATION))

    async def cleanup(self, code: int) -> None:
        if self.handshake_deadline is not None:
            self.handshake_deadline.cancel()
        if self.replay_task is not None:
            self.replay_task.cancel()
        self.tail.stop()

    async def after_groups_left(self, code: int) -> None:
        if self.connection_id is not None:
            try:
                # After the socket's other row writes: the queue keeps their order.
                await rows.close(
                    self.connection_id,
                    self.close_code or code,
                    self.last_ack,
                    presence_for=self.session_id,
                    opened=self.opened,
                )
            except Exception:
                self.log.exception("connection %s: could not record the close", self.connection_id)

    def record(self, **fields: Any) -> None:
        """Add to the socket's row, off its path (``sockets.rows`` writes a
        process's rows in batches, in the order they were asked for). The
        first call writes the row itself."""
        if self.recorded is None:
            self.recorded = rows.insert(self.connection_id, **self.opened, **fields)
        else:
            self.recorded = rows.update(self.connection_id, **fields)

    async def recorded_row(self) -> None:
        """Wait for the row (before anything that updates or counts it)."""
        if self.recorded is not None:
            try:
                await asyncio.shield(self.recorded)
            except Exception:
                self.log.exception("connection %s: could not record the socket", self.connection_id)

    # --- incoming frames -------------------------------------------------

    async def on_frame(self, text_data: str | None, bytes_data: bytes | None) -> None:
        if self.connection_id is None:
            return
        if self.phase is Phase.OPEN:  # no handshake answered yet
            await self._receive_handshake(text_data, bytes_data)
            return
        frame: dict[str, Any] = {}
        try:
            frame = p.decode(text_data, bytes_data)
            await self.commands.dispatch(frame)
        except p.FrameError as exc:
            await self.send_frame(p.error_frame(exc.code, exc.message, exc.request_id))
        except SessionError as exc:
            await self.send_frame(error_frame_for(exc, p.request_id_of(frame)))
            if isinstance(exc, RightsRevoked):
                await self.close_with(p.CLOSE_RIGHTS_CHANGED)
        except transport.GONE:
            raise  # the client left; dispatch ends the socket quietly
        except Exception:
            self.log.exception("connection %s: frame failed", self.connection_id)
            await self.send_frame(
                p.error_frame(
                    p.E_INTERNAL, "the server could not handle that", p.request_id_of(frame)
                )
            )

    async def _receive_handshake(self, text_data, bytes_data) -> None:
        try:
            frame = p.decode(text_data, bytes_data)
        except p.FrameError:
            frame = None
        if self.first_frame is None:
            self.first_frame = "undecodable" if frame is None else str(frame["type"])[:32]
        if frame is None or frame["type"] not in p.HANDSHAKE_TYPES:
            # Which of the two 4400s it was, for whoever reads the log after a
            # client reported a final close.
            self.log.info(
                "connection %s: first frame is not a handshake (%s): closing 4400",
                self.connection_id,
                "undecodable" if frame is None else repr(frame["type"])[:40],
            )
            await self.close_with(p.CLOSE_PROTOCOL_VIOLATION)
            return
        # A well-formed handshake is under way: a slow database must not
        # turn it into a 4400 (a close clients never come back from).
        self.handshake_deadline.cancel()
        with tracing.span("socket.handshake", type=frame["type"], connection=self.connection_id):
            if frame["type"] == p.START:
                await self._start(frame)
            else:
                await self._resume(frame)

    async def _start(self, frame: dict[str, Any]) -> None:
        try:
            start = p.parse_start(frame)
        except p.FrameError as exc:
            await self.send_frame(p.error_frame(exc.code, exc.message, exc.request_id))
            self._rearm_handshake_deadline()
            return
        session = await db.start_session(self.user, start)
        metrics.HANDSHAKES.labels(p.START, "ok").inc()
        self._answered(start.features, session["epoch"])
        # Joined after creation: only this socket knows the new id, so nothing
        # can have been appended to it that we would miss.
        await self.join(fanout.group_name(session["id"]))
        self._attached(session["id"], 0)
        await self.send_frame(
            frames.handshake_ok(
                p.START_OK, start.request_id, self.connection_id, session, self._features()
            )
        )
        self.record(session_id=session["id"], tab_id=start.tab_id or "", first_frame_type=p.START)
        self._begin_replay(0, session["head"])

    async def _resume(self, frame: dict[str, Any]) -> None:
        rid = p.request_id_of(frame)
        try:
            resume = p.parse_resume(frame)
        except p.Rejection as exc:
            await self._reject(rid, frame.get("session_id"), exc)
            return
        # Join first, then one read answers ownership, epoch, earliest and head:
        # an event committed after that read is published after we joined, so
        # it reaches us live. No group message is dispatched to this socket
        # until this handler returns, and one for a session it does not follow
        # is dropped (``session_event``), so nothing of a session the user may
        # not see reaches it, even though it joined before the check.
        group = fanout.group_name(resume.session_id)
        joined = p.is_session_id(resume.session_id)
        if joined:
            await self.join(group)
        seen = {"tab_id": resume.tab_id or "", "first_frame_type": p.RESUME}
        seen["resume_after"] = resume.after
        try:
            head = await db.check_resume(self.user.pk, resume)
        except p.Rejection as exc:
            if joined:
                await self.leave(group)
            await self._reject(rid, resume.session_id, exc)
            self.record(**seen)
            return
        if self.closing:
            return
        self._attached(resume.session_id, resume.after)
        metrics.HANDSHAKES.labels(p.RESUME, "ok").inc()
        self._answered(resume.features, head["epoch"])
        self.compacted_through = head["compacted_through"]
        await self.send_frame(
            frames.handshake_ok(
                p.RESUME_OK,
                resume.request_id,
                self.connection_id,
                {**head, "id": resume.session_id},
                self._features(),
                after=resume.after,
            )
        )
        self.record(session_id=resume.session_id, **seen)
        self._begin_replay(resume.after, head["head"], head["page"], head["plan"])

    def _answered(self, features: frozenset[str], epoch: str) -> None:
        """The handshake's features this socket uses, and the epoch it follows."""
        self.compact = p.FEATURE_COMPACT in features
        self.batching = p.FEATURE_BATCH in features
        self.interrupt = p.FEATURE_INTERRUPT in features
        self.branches = p.FEATURE_BRANCHES in features
        self.follower.epoch = epoch

    def _features(self) -> list[str]:
        """The handshake features this socket uses, for its start_ok / resume_ok."""
        return [
            name
            for name, on in (
                (p.FEATURE_COMPACT, self.compact),
                (p.FEATURE_BATCH, self.batching),
                (p.FEATURE_INTERRUPT, self.interrupt),
                (p.FEATURE_BRANCHES, self.branches),
            )
            if on
        ]

    def follows(self, message: dict[str, Any]) -> bool:
        """Is ``message`` (from a group) about the session this socket follows?
        Only once its handshake was answered (the phase says so, REPLAYING or
        LIVE), and never about another session (a stale membership)."""
        return self.phase in FOLLOWING and message.get("session_id") == self.session_id

    def _attached(self, session_id: str, after: int) -> None:
        self.session_id = session_id
        self.follower.order.attach(after)

    async def _reject(self, rid: Any, session_id: Any, exc: p.Rejection) -> None:
        metrics.HANDSHAKES.labels(p.RESUME, exc.reason).inc()
        # The session id is echoed only if it is an id at all: a reply never
        # repeats what a client sent of any length.
        echoed = session_id if p.is_session_id(session_id) else None
        await self.send_frame(
            frames.resume_rejected(echoed, exc.reason, exc.message, request_id=rid, **exc.extra)
        )
        self._rearm_handshake_deadline()

    def _rearm_handshake_deadline(self) -> None:
        """After a failed handshake the socket gets another 10 s for one more."""
        self.handshake_deadline = asyncio.get_running_loop().call_later(
            p.HANDSHAKE_TIMEOUT_SECONDS, self._handshake_timeout
        )

    # --- outgoing events -------------------------------------------------

    def _begin_replay(self, after: int, head: int, first_page=None, plan=None) -> None:
        if self.closing:
            return  # closed while answering the handshake (a reader that stopped)
        self.to(Phase.REPLAYING)
        self.replay_task = asyncio.ensure_future(self._replay(after, head, first_page, plan))
        self.replay_task.add_done_callback(self._replay_done)

    def _replay_done(self, task: asyncio.Task) -> None:
        if self.replay_task is task:  # an idle socket keeps no finished task
            self.replay_task = None

    async def _replay(self, after: int, head: int, first_page=None, plan=None) -> None:
        began = asyncio.get_running_loop().time()
        ids = {"session.id": self.session_id, "after": after, "head": head}
        try:
            with tracing.span("socket.replay", **ids):
                sent = await self.ranges.send_range(after, head, first_page, plan)
            # Live events that arrived meanwhile, in order, deduplicated; what
            # did not fit in the buffer comes from the log.
            if not await self.driver.caught_up(sent):
                return
            self.to(Phase.LIVE)
            metrics.REPLAY_EVENTS.observe(head - after)
            metrics.REPLAY_SECONDS.observe(asyncio.get_running_loop().time() - began)
            self.tail.arm(settings.AGENT_TAIL_SETTLE_SECONDS)
            # This socket's own presence at once; the others' is coalesced.
            await self.recorded_row()  # it counts as a viewer from its row
            mine = await db.presence(self.session_id)
            if self.pending_presence is not None:
                presence, self.pending_presence = self.pending_presence, None
                await self.send_frame(presence)
            elif mine is not None:
                await self.send_frame(frames.presence(self.session_id, **mine))
        except asyncio.CancelledError:
            raise
        except transport.GONE:
            self.to(Phase.CLOSING)
        except Exception:
            self.log.exception("connection %s: replay failed", self.connection_id)
            await self.close_with(p.CLOSE_INTERNAL_ERROR)

    async def session_event(self, message: dict[str, Any]) -> None:
        """A committed event published to the session's group."""
        if self.follows(message):
            await self._published(((message["seq"], message["text"]),))

    async def session_events(self, message: dict[str, Any]) -> None:
        """Several committed events of the session, in seq order (a busy publisher
        merges what it had queued)."""
        if self.follows(message):
            await self._published(message["events"])

    async def _published(self, events) -> None:
        """Held during the replay, else delivered (``Driver.published``)."""
        if await self.driver.published(events, holding=self.phase is Phase.REPLAYING):
            self.tail.live()

    # --- the driver's transport (``delivery.driver.Transport``) -----------

    async def emit(self, text: str, seq: int) -> bool:
        """One event's frame, under flow control; False if the socket closed."""
        if not await self.writable():
            return False
        await self.send(text_data=text)
        return True

    async def emit_range(self, after: int, upto: int) -> int:
        return await self.ranges.send_range(after, upto)

    async def end(self, end: End) -> None:
        """Stop following: the rights gone close 4403; the log rebuilt or the
        session deleted 1013, whose resume is told epoch_mismatch or not_found."""
        if end is REVOKED:
            await self.auth_revoked({"type": fanout.REVOKED_MESSAGE})
            return
        self.log.info("connection %s: session %s: closing 1013", self.connection_id, end.reason)
        await self.close_with(p.CLOSE_TRY_AGAIN)

    async def session_title(self, message: dict[str, Any]) -> None:
        """The session's title changed: its tabs show it at once."""
        if not self.follows(message):
            return
        await self.send_frame(frames.title(self.session_id, message["title"]))

    async def session_rotated(self, message: dict[str, Any]) -> None:
        """The session's epoch was rotated: this socket's cursor means nothing
        now. Close (1013, retryable): the client resumes and is told
        ``epoch_mismatch`` (a late message, for the epoch it resumed on, is
        ignored)."""
        if self.follows(message):
            await self.driver.rotated(message.get("epoch"))

    async def session_presence(self, message: dict[str, Any]) -> None:
        if not self.follows(message):
            return
        frame = frames.presence(
            self.session_id, message["viewers"], message["running"], message.get("head")
        )
        if self.phase is Phase.REPLAYING:
            self.pending_presence = frame
            return
        await self.send_frame(frame)
