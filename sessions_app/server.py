"""The server process around the ASGI application: start-up, shutdown, buffers.

``RuntimeStarter`` registers daphne's event loop for fan-out and starts the
runtime's background part on the first connection. ``install_daphne_hooks``
adapts daphne: sockets are closed with 1012 on a graceful stop (SIGTERM
included), and each WebSocket scope gets a probe of how many bytes wait in
its transport, so a consumer can stop sending to a client that stopped
reading (``consumers``' flow control) instead of buffering without bound.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import sys
import threading
import weakref

from channels.db import database_sync_to_async
from django.conf import settings

from . import fanout
from .protocol import CLOSE_INTERNAL_ERROR, CLOSE_SERVICE_RESTART, CLOSE_TRY_AGAIN

SEND_BUFFER_EXTENSION = "sessions_app.send_buffer"
_REGISTERED_SERVER_CODES = (CLOSE_INTERNAL_ERROR, CLOSE_SERVICE_RESTART, CLOSE_TRY_AGAIN)

log = logging.getLogger(__name__)


def install_daphne_hooks() -> None:
    """Under daphne: graceful close with 1012, and the send-buffer probe."""
    if "daphne.server" not in sys.modules:
        return
    _install_send_buffer_probe()
    _install_graceful_shutdown()
    _skip_autobahn_debug_formatting()


def _skip_autobahn_debug_formatting() -> None:
    """autobahn formats the arguments of a debug log line on every frame it
    writes (``hltype(self.sendData)``, coloured text), whether or not debug
    logging is on: 7% of a long replay's time in a profile. Those lines only
    name the function, so with debug off the name is left unformatted."""
    import logging

    from autobahn.websocket import protocol

    if not logging.getLogger("autobahn").isEnabledFor(logging.DEBUG):
        protocol.hltype = _plain_name


def _plain_name(obj) -> str:
    return getattr(obj, "__qualname__", "")


def _transport_buffered(protocol_ref) -> int:
    """Bytes written to a socket's transport that the kernel has not taken yet."""
    protocol = protocol_ref()
    transport = getattr(protocol, "transport", None)
    if transport is None:
        return 0
    # Twisted's FileDescriptor keeps what it could not write yet in these.
    pending = len(getattr(transport, "dataBuffer", b"")) - getattr(transport, "offset", 0)
    return pending + getattr(transport, "_tempDataLen", 0)


def _install_send_buffer_probe() -> None:
    from daphne.server import Server

    original = Server.create_application

    def create_application(self, protocol, scope):
        if scope.get("type") == "websocket":
            probe = functools.partial(_transport_buffered, weakref.ref(protocol))
            scope.setdefault("extensions", {})[SEND_BUFFER_EXTENSION] = probe
        return original(self, protocol, scope)

    Server.create_application = create_application


# How long a graceful stop waits for its clients to answer the 1012 closes
# before daphne cancels what is left.
SHUTDOWN_DRAIN_SECONDS = 5.0

_daphne_server = None  # daphne's Server, once it listens


def _install_graceful_shutdown() -> None:
    """Under daphne, close every socket with 1012 before the server stops.

    Daphne cancels its applications at shutdown without a close frame (the
    client would see 1006). Called while the ASGI module is imported, which is
    before daphne registers its own shutdown trigger, so ours runs first: it
    sends every open WebSocket of the process its close frame at once (no
    round through the consumers: with thousands of sockets a fixed grace for
    their dispatch was too short and most clients saw 1006). Twisted calls
    every "before shutdown" trigger before it waits for any, so daphne's own
    (which cancels every application) is wrapped to wait, at most
    ``SHUTDOWN_DRAIN_SECONDS``, for the clients' answers, the consumers'
    ``disconnect`` (their rows' close, presence) and the row writes queued.
    """
    from daphne.server import Server
    from daphne.ws_protocol import WebSocketProtocol
    from twisted.internet import defer, reactor

    def server_close(protocol, code=None):
        # Autobahn's sendClose accepts only 1000 and 3000-4999, but 1011,
        # 1012 and 1013 are registered codes the protocol uses; sendCloseFrame
        # is what sendClose calls once its checks pass.
        if code in _REGISTERED_SERVER_CODES:
            if protocol.state == protocol.STATE_OPEN:
                protocol.sendCloseFrame(code=code, isReply=False)
            return
        original_server_close(protocol, code)

    original_server_close = WebSocketProtocol.serverClose
    WebSocketProtocol.serverClose = server_close
    draining: list[asyncio.Future] = []
    original_kill = Server.kill_all_applications

    def kill_all_applications(self):
        if not draining:
            return original_kill(self)
        waited = defer.Deferred.fromFuture(draining[0])
        waited.addBoth(lambda _: original_kill(self))
        return waited

    Server.kill_all_applications = kill_all_applications
    ports: list = []  # what daphne listens on, to stop taking upgrades at a stop
    original_listen_success = Server.listen_success

    def listen_success(self, port):
        global _daphne_server
        _daphne_server = self  # once listening, before any application
        ports.append(port)
        return original_listen_success(self, port)

    Server.listen_success = listen_success
    # Daphne's reactor stops on SIGINT but not on SIGTERM (what process
    # managers send): make SIGTERM a graceful stop too.
    reactor.callWhenRunning(
        lambda: signal.signal(signal.SIGTERM, lambda *_: reactor.callFromThread(reactor.stop))
    )

    def open_sockets() -> list:
        server = _daphne_server
        if server is None:
            return []
        return [
            protocol
            for protocol in list(server.connections)
            if isinstance(protocol, WebSocketProtocol) and protocol.state == protocol.STATE_OPEN
        ]

    def close_all():
        # Synchronous up to the close frames: twisted calls every "before
        # shutdown" trigger in one go, and daphne's own (registered after
        # this one) cancels every application; a coroutine scheduled here
        # would run only after that.
        try:
            # A client coming back at once must reach the next server, not
            # this one: it would be cut (1006) when this one exits.
            for port in ports:
                port.stopListening()
            sockets = open_sockets()
            for protocol in sockets:
                protocol.serverClose(code=CLOSE_SERVICE_RESTART)
            log.info("stopping: closed %d sockets with 1012", len(sockets))
        except Exception:
            log.exception("graceful close failed")
            sockets = []
        draining.append(asyncio.ensure_future(drain(sockets)))
        return defer.Deferred.fromFuture(asyncio.shield(draining[0]))

    def settled(protocol) -> bool:
        """Closed, and its application finished (its ``disconnect`` ran)."""
        if protocol.state != protocol.STATE_CLOSED:
            return False
        details = _daphne_server.connections.get(protocol) if _daphne_server else None
        instance = (details or {}).get("application_instance")
        return instance is None or instance.done()

    async def drain(sockets: list) -> None:
        try:
            from . import connection_rows
            from .runtime.executor import abort_all

            # The runs stop at once; only the sockets' goodbyes are waited for.
            abort_all()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SHUTDOWN_DRAIN_SECONDS
            while loop.time() < deadline:
                if all(settled(p) for p in sockets):
                    break
                await asyncio.sleep(0.05)  # the clients' close answers, within a bound
            await asyncio.wait_for(connection_rows.flush(), max(deadline - loop.time(), 0.5))
        except Exception:
            log.exception("graceful close failed")

    reactor.addSystemEventTrigger("before", "shutdown", close_all)


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
        from .identity import worker_id
        from .presence import ConnectionToucher

        ConnectionToucher(worker_id()).start()
        if settings.AGENT_RUNNER == "embedded":
            from .runtime.embedded import start_embedded_runtime

            await database_sync_to_async(start_embedded_runtime)()
        else:
            # Workers sweep too; a server sweeping as well means a run whose
            # worker died is finished even when every worker is down.
            from .runtime.sweeper import Sweeper

            Sweeper().start()
        from .heap import freeze_startup_objects

        freeze_startup_objects()
