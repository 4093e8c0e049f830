"""The tail check of a session socket (``SessionConsumer``'s, in a class of
its own).

A publication lost at the *end* of a burst leaves no later event to reveal
the hole, so each socket checks the tail: ``AGENT_TAIL_SETTLE_SECONDS`` after
the last live event (and every ``AGENT_TAIL_PROBE_SECONDS`` while idle) it
reads the session's head once and refills up to it if it is behind. The
first check at least ``RIGHTS_READ_AFTER_SECONDS`` after the open reads the
user's rights in the same trip (``sockets.base``). The class it is mixed into
provides the socket's ``phase`` and ``sequencer``, ``_send_range`` and ``rights_*``. An epoch
rotation seen with a head read closes the socket (``_rotated``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.conf import settings

from sessions_app.delivery import reads
from sessions_app.delivery.core import Phase
from sessions_app.server.patches import PeerGone
from sessions_app.wire import protocol as p


class TailCheck:
    """Refills what was committed but never published (see the module)."""

    def _arm_tail_check(self, delay: float) -> None:
        """Check the head ``delay`` seconds from now, unless a check is due sooner."""
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if self.tail_timer is not None:
            if self.tail_timer.when() <= due:
                return
            self.tail_timer.cancel()
        self.tail_timer = loop.call_at(due, self._tail_due)

    def _tail_due(self) -> None:
        self.tail_timer = None
        if self.closing or self.session_id is None:
            return
        settle = settings.AGENT_TAIL_SETTLE_SECONDS
        quiet = asyncio.get_running_loop().time() - self.last_live
        if self.phase is Phase.REPLAYING or quiet < settle:
            self._arm_tail_check(max(settle - quiet, 0.05))
            return
        if self.tail_task is None or self.tail_task.done():
            self.tail_task = asyncio.ensure_future(self._check_tail())

    async def _check_tail(self) -> None:
        """Refill events that were committed but whose publication never came."""
        try:
            # Read without the lock: live delivery goes on meanwhile, and most
            # checks find nothing missing. The first one after the rights
            # group was joined reads the rights too (``AppSocket``).
            rights = self.rights_to_check()
            state, granted = await reads.tail_state(self.session_id, rights)
            await self.rights_read(granted)
            head = None
            if state is not None and not await self._rotated(state[1]):
                head, self.compacted_through = state[0], state[2]
            order = self.sequencer
            if head is not None and head > order.last_sent and not self.closing:
                async with self.send_lock:
                    if head > order.last_sent:
                        self.log.info(
                            "connection %s: refilling %s..%s after a lost publication",
                            self.connection_id,
                            order.last_sent + 1,
                            head,
                        )
                        order.sent(await self._send_range(order.last_sent, head))
        except asyncio.CancelledError:
            raise
        except PeerGone:
            self.to(Phase.CLOSING)
        except Exception:
            self.log.exception("connection %s: tail check failed", self.connection_id)
        if not self.closing:
            self._arm_tail_check(settings.AGENT_TAIL_PROBE_SECONDS)

    async def _rotated(self, epoch: str) -> bool:
        """Whether the session's epoch changed since the handshake: then close
        (1013), as for the rotation's own message. Checked whenever the head is
        read anyway (sync, tail check), so a rotation whose message could not
        reach this process (a command run beside an embedded server) is still
        noticed."""
        if self.epoch is None or epoch == self.epoch:
            return False
        await self.session_rotated({"session_id": self.session_id, "epoch": epoch})
        return True

    async def session_rotated(self, message: dict[str, Any]) -> None:
        """The session's epoch was rotated: this socket's cursor means nothing
        now. Close (1013, retryable): the client resumes and is told
        ``epoch_mismatch``."""
        if message.get("session_id") != self.session_id or self.session_id is None:
            return
        if message.get("epoch") == self.epoch:
            return  # a late message: this socket resumed on the new epoch already
        self.log.info("connection %s: session epoch rotated: closing 1013", self.connection_id)
        await self._close(p.CLOSE_TRY_AGAIN)
