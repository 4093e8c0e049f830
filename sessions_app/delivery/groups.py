"""The channel-layer groups one reader is in: joined, renewed, left.

A layer forgets a membership after its ``group_expiry`` (a day by default):
a reader open longer would silently stop receiving. Every group is joined
again every third of that, until the reader leaves them all.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("sessions_app.delivery")


class Membership:
    """The groups of one channel (``join``, ``leave_all``), renewed meanwhile."""

    def __init__(self, layer, channel: str) -> None:
        self.layer, self.channel = layer, channel
        self.groups: list[str] = []
        self.renewing: asyncio.Task | None = None

    async def join(self, *groups: str) -> None:
        for group in groups:
            # Kept before the join succeeds: one that fails is tried again at
            # each renewal, and left at the end all the same.
            self.groups.append(group)
            await self.layer.group_add(group, self.channel)
        if self.renewing is None:
            self.renewing = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        period = max(getattr(self.layer, "group_expiry", 86400) / 3, 0.1)
        while True:
            await asyncio.sleep(period)
            for group in list(self.groups):
                try:
                    await self.layer.group_add(group, self.channel)
                except Exception:
                    log.exception("renewing %s failed", group)

    async def leave_all(self) -> None:
        """Stop renewing and leave every group (each on its own: one failure
        must not keep the others)."""
        if self.renewing is not None:
            self.renewing.cancel()
            # Waited for, not awaited: a cancellation of the caller stays its own.
            await asyncio.wait({self.renewing})
        groups, self.groups = self.groups, []
        for group in groups:
            try:
                await self.layer.group_discard(group, self.channel)
            except Exception:
                log.exception("leaving %s failed", group)
