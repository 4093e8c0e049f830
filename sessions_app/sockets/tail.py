"""The tail check of a session socket: ``TailCheck``, one per session socket.

A publication lost at the *end* of a burst leaves no later event to reveal
the hole, so each socket checks the tail: ``AGENT_TAIL_SETTLE_SECONDS`` after
the last live event (and every ``AGENT_TAIL_PROBE_SECONDS`` while idle) it
reads the session's head once and refills up to it if it is behind. The
first check at least ``RIGHTS_READ_AFTER_SECONDS`` after the open reads the
user's rights in the same trip (``sockets.base``). What the read means (a
refill, the rights gone, the log rebuilt, the session deleted) is the
delivery driver's (``Driver.tail``), as for every HTTP reader; this module
only says when to read. What it needs of its socket is ``TailTarget``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from django.conf import settings

from sessions_app.delivery import reads, transport
from sessions_app.delivery.core import Phase
from sessions_app.delivery.driver import Driver
from sessions_app.server.logs import Outage

# Every socket of a daphne checks its tail: in a database outage they all
# fail at once, one line for them all.
_outage = Outage(logging.getLogger("sessions_app.sockets.session"))


class TailTarget(Protocol):
    """What a ``TailCheck`` needs of its socket."""

    session_id: str | None
    connection_id: str | None
    phase: Phase
    compacted_through: int
    driver: Driver
    log: Any

    @property
    def closing(self) -> bool: ...

    def to(self, phase: Phase) -> None: ...

    def rights_to_check(self, soon: bool = False) -> tuple[int, str] | None: ...

    def rights_seen(self, granted: bool | None) -> None: ...

    def renew_groups_now(self) -> None: ...


class TailCheck:
    """Refills what was committed but never published (see the module)."""

    def __init__(self, socket: TailTarget) -> None:
        self.socket = socket
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task | None = None
        self.last_live = 0.0

    def live(self) -> None:
        """A live event went out: check once things settle after it."""
        self.last_live = asyncio.get_running_loop().time()
        self.arm(settings.AGENT_TAIL_SETTLE_SECONDS)

    def arm(self, delay: float) -> None:
        """Check the head ``delay`` seconds from now, unless a check is due sooner."""
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if self.timer is not None:
            if self.timer.when() <= due:
                return
            self.timer.cancel()
        self.timer = loop.call_at(due, self._due)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None:
            self.task.cancel()

    def _due(self) -> None:
        self.timer = None
        if self.socket.phase not in (Phase.REPLAYING, Phase.LIVE):
            return
        settle = settings.AGENT_TAIL_SETTLE_SECONDS
        quiet = asyncio.get_running_loop().time() - self.last_live
        if self.socket.phase is Phase.REPLAYING or quiet < settle:
            self.arm(max(settle - quiet, 0.05))
            return
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._check())
            self.task.add_done_callback(self._checked)

    def _checked(self, task: asyncio.Task) -> None:
        if self.task is task:  # an idle socket keeps no finished task
            self.task = None

    def _refilling(self, refill) -> None:
        """Said before the refill goes out (a test reads it once the tab has it)."""
        self.socket.log.info(
            "connection %s: refilling %s..%s after a lost publication",
            self.socket.connection_id,
            refill.after + 1,
            refill.upto,
        )

    async def _check(self) -> None:
        """Refill events that were committed but whose publication never came."""
        socket = self.socket
        try:
            # Read without the lock: live delivery goes on meanwhile, and most
            # checks find nothing missing. The first one after the rights
            # group was joined reads the rights too (``AppSocket``).
            rights = socket.rights_to_check()
            state, granted = await reads.tail_state(socket.session_id, rights)
            socket.rights_seen(granted)
            if state is not None:
                socket.compacted_through = state[2]
            if await socket.driver.tail(state, granted, self._refilling) is not None:
                # A lost publication may be a lost membership (a Redis host
                # restarted empty): join again now, not at the next renewal.
                socket.renew_groups_now()
        except asyncio.CancelledError:
            raise
        except transport.GONE:
            socket.to(Phase.CLOSING)
        except Exception as exc:
            _outage.failed("a socket's tail check", exc, connection_id=socket.connection_id)
        if not socket.closing:
            self.arm(settings.AGENT_TAIL_PROBE_SECONDS)
