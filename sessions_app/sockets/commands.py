"""A session socket's commands after its handshake: ``Commands``, one per
session socket, for ``ping``, ``ack``, ``visibility``, ``send``, ``decide``,
``cancel``, ``sync`` and ``switch``. Each is parsed by the wire's
``protocol``, done through the socket's queries (``queries``: the runtime's
functions, on the sockets' pool, checked against the rights the socket was
let in with) and answered with its
``*_ok`` frame (``wire.frames``); a failure becomes an ``error`` frame in
``SessionConsumer``. What it needs of its socket is ``CommandTarget``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from sessions_app.delivery import reads
from sessions_app.delivery.driver import Driver
from sessions_app.server import tracing
from sessions_app.sockets import queries as db
from sessions_app.sockets.replay import RangeSender
from sessions_app.sockets.tail import TailCheck
from sessions_app.wire import decisions, frames
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import BranchRateLimited, SessionError
from sessions_app.wire.rates import TokenBucket


class CommandTarget(Protocol):
    """What ``Commands`` needs of its socket."""

    session_id: str | None
    user: Any
    granted: tuple[int, str]  # the rights it was let in with
    last_ack: int
    compacted_through: int
    driver: Driver
    replay_task: asyncio.Task | None
    ranges: RangeSender
    tail: TailCheck

    async def send_frame(self, frame: dict[str, Any]) -> None: ...

    def record(self, **fields: Any) -> None: ...


class Commands:
    """What a following socket does with each command frame."""

    def __init__(self, socket: CommandTarget) -> None:
        self.socket = socket
        # Regenerates, edits and switches have a rate of their own.
        self.branch_bucket = TokenBucket(p.BRANCH_RATE_PER_SECOND, p.BRANCH_RATE_BURST)

    async def dispatch(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        rid = p.request_id_of(frame)
        if kind in p.HANDSHAKE_TYPES:
            raise p.FrameError(p.E_BAD_FRAME, "this socket already follows a session", rid)
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise p.FrameError(p.E_UNKNOWN_TYPE, f"unknown frame type {p.quoted(kind)}", rid)
        await handler(self, frame)

    async def _on_ping(self, frame: dict[str, Any]) -> None:
        await self.socket.send_frame(frames.pong(p.request_id_of(frame, strict=True)))

    async def _on_ack(self, frame: dict[str, Any]) -> None:
        seq = p.parse_ack(frame)
        if seq > self.socket.last_ack:
            self.socket.last_ack = seq
            self.socket.record(last_ack=seq)

    async def _on_visibility(self, frame: dict[str, Any]) -> None:
        # The socket's row says it (runtime.notify: is any tab of its user visible?).
        self.socket.record(visible=p.parse_visibility(frame))

    def _branch_rate(self) -> None:
        if not self.branch_bucket.take(asyncio.get_running_loop().time()):
            raise BranchRateLimited()

    def _by(self) -> tuple[str, str, tuple[int, str]]:
        """The session, the user's name and the rights every command is done with."""
        socket = self.socket
        return socket.session_id, socket.user.get_username(), socket.granted

    async def _on_send(self, frame: dict[str, Any]) -> None:
        send = p.parse_send(frame)
        if send.regenerate or send.edit_of:
            self._branch_rate()
        session_id, username, granted = self._by()
        with tracing.span("session.send", **{"session.id": session_id, "via": "socket"}):
            result = await db.submit(session_id, send, username, granted, tracing.carrier())
        await self.socket.send_frame(frames.send_ok(send.request_id, result))

    async def _on_decide(self, frame: dict[str, Any]) -> None:
        decide = decisions.parse_decide(frame)
        session_id, username, granted = self._by()
        await db.decide(session_id, decide, username, granted)
        await self.socket.send_frame(
            frames.decide_ok(decide.request_id, decide.approval_id, decide.decision)
        )

    async def _on_cancel(self, frame: dict[str, Any]) -> None:
        rid, run_id = p.parse_cancel(frame)
        session_id, username, granted = self._by()
        await db.cancel(session_id, run_id, username, granted)
        await self.socket.send_frame(frames.cancel_ok(rid, run_id))

    async def _on_switch(self, frame: dict[str, Any]) -> None:
        rid, run_id = p.parse_switch(frame)
        self._branch_rate()
        session_id, username, granted = self._by()
        path = await db.switch(session_id, run_id, username, granted)
        await self.socket.send_frame(frames.switch_ok(rid, run_id, path[-1]))

    async def _on_sync(self, frame: dict[str, Any]) -> None:
        socket = self.socket
        rid, after = p.parse_sync(frame)
        if socket.replay_task is not None and not socket.replay_task.done():
            await asyncio.shield(socket.replay_task)
        state = await reads.head_of(socket.session_id)
        if state is None:
            raise p.FrameError(p.E_NOT_FOUND, "this session no longer exists", rid)
        head, epoch, socket.compacted_through = state
        if await socket.driver.rotated(epoch):
            return
        async with socket.driver.lock:
            await socket.send_frame(frames.sync_ok(rid, after, head))
            # The client asked for these, so they may repeat what it already has.
            # Live delivery goes on after the head, whatever ``after`` said (a
            # cursor past the head sends nothing and must not skip what follows).
            socket.driver.order.sent(min(await socket.ranges.send_range(after, head), head))


def error_frame_for(exc: SessionError, request_id: Any) -> dict[str, Any]:
    """The ``error`` frame reporting a domain error (``already_decided`` carries the
    standing ``decision`` and ``decided_by``)."""
    detail = exc.detail()
    return p.error_frame(detail.pop("code"), detail.pop("message"), request_id, **detail)


_HANDLERS = {
    p.PING: Commands._on_ping,
    p.ACK: Commands._on_ack,
    p.VISIBILITY: Commands._on_visibility,
    p.SEND: Commands._on_send,
    p.DECIDE: Commands._on_decide,
    p.CANCEL: Commands._on_cancel,
    p.SYNC: Commands._on_sync,
    p.SWITCH: Commands._on_switch,
}
