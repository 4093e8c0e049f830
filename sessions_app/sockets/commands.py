"""A session socket's commands after its handshake (``SessionConsumer``'s, in
a class of its own): ``ping``, ``ack``, ``send``, ``decide``, ``cancel``,
``sync`` and ``switch``. Each is parsed by the wire's ``protocol``, done through the
socket's queries (``queries``: the runtime's functions, on the sockets' pool,
checked against the rights the socket was let in with) and answered with its
``*_ok`` frame; a failure becomes an ``error`` frame in ``SessionConsumer``.
The class it is mixed into provides the socket: ``session_id``, ``user``,
``granted``, ``sequencer``, ``send_lock``, ``replay_task``, ``_send``,
``_send_range``, ``_record`` and ``_rotated``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sessions_app.delivery import reads
from sessions_app.server import tracing
from sessions_app.sockets import queries as db
from sessions_app.wire import frames
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import BranchRateLimited, SessionError


class Commands:
    """What a following socket does with each command frame."""

    async def _dispatch(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        rid = p.request_id_of(frame)
        if kind in p.HANDSHAKE_TYPES:
            raise p.FrameError(p.E_BAD_FRAME, "this socket already follows a session", rid)
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise p.FrameError(p.E_UNKNOWN_TYPE, f"unknown frame type {p.quoted(kind)}", rid)
        await handler(self, frame)

    async def _on_ping(self, frame: dict[str, Any]) -> None:
        await self._send(frames.pong(p.request_id_of(frame, strict=True)))

    async def _on_ack(self, frame: dict[str, Any]) -> None:
        seq = p.parse_ack(frame)
        if seq > self.last_ack:
            self.last_ack = seq
            self._record(last_ack=seq)

    def _branch_rate(self) -> None:
        """Regenerates, edits and switches have a rate of their own per socket."""
        bucket = self.__dict__.get("branch_bucket")
        if bucket is None:
            bucket = self.branch_bucket = p.TokenBucket(
                p.BRANCH_RATE_PER_SECOND, p.BRANCH_RATE_BURST
            )
        if not bucket.take(asyncio.get_running_loop().time()):
            raise BranchRateLimited()

    async def _on_send(self, frame: dict[str, Any]) -> None:
        send = p.parse_send(frame)
        if send.regenerate or send.edit_of:
            self._branch_rate()
        with tracing.span("session.send", **{"session.id": self.session_id, "via": "socket"}):
            result = await db.submit(
                self.session_id, send, self.user.get_username(), self.granted, tracing.carrier()
            )
        await self._send(frames.send_ok(send.request_id, result))

    async def _on_decide(self, frame: dict[str, Any]) -> None:
        decide = p.parse_decide(frame)
        await db.decide(self.session_id, decide, self.user.get_username(), self.granted)
        await self._send(frames.decide_ok(decide.request_id, decide.approval_id, decide.decision))

    async def _on_cancel(self, frame: dict[str, Any]) -> None:
        rid, run_id = p.parse_cancel(frame)
        await db.cancel(self.session_id, run_id, self.user.get_username(), self.granted)
        await self._send(frames.cancel_ok(rid, run_id))

    async def _on_switch(self, frame: dict[str, Any]) -> None:
        rid, run_id = p.parse_switch(frame)
        self._branch_rate()
        path = await db.switch(self.session_id, run_id, self.user.get_username(), self.granted)
        await self._send(frames.switch_ok(rid, run_id, path[-1]))

    async def _on_sync(self, frame: dict[str, Any]) -> None:
        rid, after = p.parse_sync(frame)
        if self.replay_task is not None and not self.replay_task.done():
            await asyncio.shield(self.replay_task)
        state = await reads.head_of(self.session_id)
        if state is None:
            raise p.FrameError(p.E_NOT_FOUND, "this session no longer exists", rid)
        head, epoch, self.compacted_through = state
        if await self._rotated(epoch):
            return
        async with self.send_lock:
            await self._send(frames.sync_ok(rid, after, head))
            # The client asked for these, so they may repeat what it already has.
            # Live delivery goes on after the head, whatever ``after`` said (a
            # cursor past the head sends nothing and must not skip what follows).
            self.sequencer.sent(min(await self._send_range(after, head), head))


def error_frame_for(exc: SessionError, request_id: Any) -> dict[str, Any]:
    """The ``error`` frame reporting a domain error (``already_decided`` carries the
    standing ``decision`` and ``decided_by``)."""
    detail = exc.detail()
    return p.error_frame(detail.pop("code"), detail.pop("message"), request_id, **detail)


_HANDLERS = {
    p.PING: Commands._on_ping,
    p.ACK: Commands._on_ack,
    p.SEND: Commands._on_send,
    p.DECIDE: Commands._on_decide,
    p.CANCEL: Commands._on_cancel,
    p.SYNC: Commands._on_sync,
    p.SWITCH: Commands._on_switch,
}
