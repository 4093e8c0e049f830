"""The server process around the ASGI application: the runtime's start.

``RuntimeStarter`` registers daphne's event loop for fan-out and starts the
runtime's background part on the first connection. What adapts daphne itself
(the graceful stop, the send-buffer probe) is in ``server.patches``.
"""

from __future__ import annotations

import asyncio
import threading

from channels.db import database_sync_to_async
from django.conf import settings
from django.urls import get_resolver

from sessions_app import fanout
from sessions_app.fanout.presence import ConnectionToucher
from sessions_app.runtime import mcp
from sessions_app.runtime.embedded import start_embedded_runtime
from sessions_app.runtime.sweeper import Sweeper
from sessions_app.server.heap import freeze_startup_objects
from sessions_app.server.identity import worker_id


class RuntimeStarter:
    """ASGI wrapper that, on the first connection or request, registers the
    server's event loop for fan-out and starts the runtime's background part:
    in the embedded profile recovery of what a previous process left plus the
    lease sweeper, in the production profile the sweeper alone."""

    def __init__(self, app):
        self.app = app
        self._started = False
        self._lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if not self._started and scope["type"] in ("http", "websocket"):
            await self._start()
        return await self.app(scope, receive, send)

    async def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        fanout.publisher.attach(asyncio.get_running_loop())
        if not settings.AGENT_RUNTIME_AUTOSTART:
            return

        ConnectionToucher(worker_id()).start()
        if settings.AGENT_RUNNER == "embedded":
            await database_sync_to_async(start_embedded_runtime)()
            mcp.refresh_in_background()  # this process runs agents: its MCP servers
        else:
            # Workers sweep too; a server sweeping as well means a run whose
            # worker died is finished even when every worker is down.

            Sweeper().start()

        # The URLconf and every view it names, loaded now rather than by the
        # first page (a probe answered ahead of Django loads none of it), so
        # they are frozen with the rest of the start-up objects.
        get_resolver().url_patterns  # noqa: B018 (the property imports them)
        freeze_startup_objects()
