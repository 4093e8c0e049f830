"""Flow control before every write, for every transport.

A reader that stops reading must not make the server hold what it has not
read: before each write, a transport asks ``Flow.writable``. While the
reader has more than ``AGENT_SEND_BUFFER_BYTES`` unread (the transport's
send-buffer probe, ``delivery.transport.send_buffer_probe``) it waits, until the
reader is down to half of that; a reader that reads nothing for
``AGENT_SLOW_CONSUMER_SECONDS`` gets ``False``, and its transport ends it
(a socket closes 4408, the SSE stream ends its response: both come back
from their cursor). What one reader costs the server is so bounded,
replay and live alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from django.conf import settings

# The transport offers no wake-up to an ASGI application when its buffer
# drains: it is looked at again after this long.
POLL_SECONDS = 0.02


class Flow:
    """One reader's flow control (``probe``: unread bytes, or None when the
    transport has no probe, as under a test's in-memory transport)."""

    def __init__(self, probe: Callable[[], int] | None) -> None:
        self.probe = probe

    def pressed(self) -> bool:
        """Has the reader more than the limit unread? (The hot path's check:
        no coroutine when nothing waits.)"""
        return self.probe is not None and self.probe() > settings.AGENT_SEND_BUFFER_BYTES

    async def writable(self, closing: Callable[[], bool]) -> bool:
        """True once the next write may go; False if ``closing()`` turned true
        meanwhile or the reader read nothing for the slow-consumer period."""
        if not self.pressed():
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.AGENT_SLOW_CONSUMER_SECONDS
        while self.probe() > settings.AGENT_SEND_BUFFER_BYTES // 2:
            if closing() or loop.time() > deadline:
                return False
            await asyncio.sleep(POLL_SECONDS)
        return not closing()

    def unread(self) -> int:
        return self.probe() if self.probe is not None else 0
