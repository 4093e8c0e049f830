"""daphne's graceful stop: every socket closed 1012, and the consumers
waited for, before the server exits (SIGTERM too).

Daphne cancels its applications at shutdown without a close frame (the
client would see 1006). ``GracefulStop.install`` runs while the ASGI module
is imported, before daphne registers its own shutdown trigger, so ours runs
first: it stops listening (a client coming back must reach the next server)
and sends every open WebSocket of the process its close frame at once (no
round through the consumers: with thousands of sockets a fixed grace for
their dispatch was too short and most clients saw 1006). Twisted calls every
"before shutdown" trigger before it waits for any, so daphne's own (which
cancels every application) is wrapped to wait, at most
``SHUTDOWN_DRAIN_SECONDS``, for the clients' answers, the consumers'
``disconnect`` (their rows' close, presence) and the row writes queued.

What is wrapped: daphne's ``Server.kill_all_applications`` (to wait),
``Server.listen_success`` (to know the server and its ports) and
``WebSocketProtocol.serverClose`` (autobahn's ``sendClose`` refuses the
registered codes 1011, 1012 and 1013 the protocol uses).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from sessions_app.server import exit_watch
from sessions_app.server.patches.registry import is_ours, mark, source_of
from sessions_app.wire import protocol as p

log = logging.getLogger("sessions_app.server.patches")

# How long a graceful stop waits for its clients to answer the 1012 closes
# before daphne cancels what is left.
SHUTDOWN_DRAIN_SECONDS = 5.0
# Codes autobahn's sendClose refuses though the protocol uses them.
REGISTERED_SERVER_CODES = (p.CLOSE_INTERNAL_ERROR, p.CLOSE_SERVICE_RESTART, p.CLOSE_TRY_AGAIN)


class GracefulStop:
    """One per process (``STOP``): the server once it listens, its ports, and
    the drain a stop started; ``on_stop`` runs first at a stop (the runtime
    hands back its runs), ``flush`` last (the socket rows' writes)."""

    def __init__(self) -> None:
        self.server = None  # daphne's Server, once it listens
        self.ports: list = []
        self.draining: list[asyncio.Future] = []
        self.on_stop: Callable[[], None] = lambda: None
        self.flush: Callable[[], Awaitable[None]] | None = None

    def install(self) -> None:
        from daphne.server import Server  # under daphne only
        from daphne.ws_protocol import WebSocketProtocol  # under daphne only
        from twisted.internet import reactor  # under daphne only

        if is_ours(Server.kill_all_applications):
            return
        self._wrap_server_close(WebSocketProtocol)
        self._wrap_server(Server)
        # Daphne's reactor stops on SIGINT but not on SIGTERM (what process
        # managers send): make SIGTERM a graceful stop too.
        reactor.callWhenRunning(
            lambda: signal.signal(signal.SIGTERM, lambda *_: reactor.callFromThread(reactor.stop))
        )
        reactor.addSystemEventTrigger("before", "shutdown", self.close_all)
        reactor.addSystemEventTrigger("after", "shutdown", exit_watch.exit_after)

    def _wrap_server_close(self, socket_class) -> None:
        original = socket_class.serverClose

        def server_close(protocol, code=None):
            # sendCloseFrame is what sendClose calls once its checks pass.
            if code in REGISTERED_SERVER_CODES:
                if protocol.state == protocol.STATE_OPEN:
                    protocol.sendCloseFrame(code=code, isReply=False)
                return
            original(protocol, code)

        socket_class.serverClose = mark(server_close)

    def _wrap_server(self, server_class) -> None:
        from twisted.internet import defer  # under daphne only

        original_kill, original_listen = (
            server_class.kill_all_applications,
            server_class.listen_success,
        )
        stop = self

        def kill_all_applications(server):
            if not stop.draining:
                return original_kill(server)
            waited = defer.Deferred.fromFuture(stop.draining[0])
            waited.addBoth(lambda _: original_kill(server))
            return waited

        def listen_success(server, port):
            stop.server = server  # once listening, before any application
            stop.ports.append(port)
            return original_listen(server, port)

        server_class.kill_all_applications = mark(kill_all_applications)
        server_class.listen_success = mark(listen_success)

    def open_sockets(self) -> list:
        from daphne.ws_protocol import WebSocketProtocol  # under daphne only

        if self.server is None:
            return []
        return [
            protocol
            for protocol in list(self.server.connections)
            if isinstance(protocol, WebSocketProtocol) and protocol.state == protocol.STATE_OPEN
        ]

    def close_all(self):
        """Twisted's "before shutdown" trigger. Synchronous up to the close
        frames: twisted calls every such trigger in one go, and daphne's own
        (registered after this one) cancels every application; a coroutine
        scheduled here would run only after that."""
        from twisted.internet import defer  # under daphne only

        try:
            for port in self.ports:
                port.stopListening()
            sockets = self.open_sockets()
            for protocol in sockets:
                protocol.serverClose(code=p.CLOSE_SERVICE_RESTART)
            log.info("stopping: closed %d sockets with 1012", len(sockets))
        except Exception:
            log.exception("graceful close failed")
            sockets = []
        self.draining.append(asyncio.ensure_future(self.drain(sockets)))
        return defer.Deferred.fromFuture(asyncio.shield(self.draining[0]))

    def settled(self, protocol) -> bool:
        """Closed, and its application finished (its ``disconnect`` ran)."""
        if protocol.state != protocol.STATE_CLOSED:
            return False
        details = self.server.connections.get(protocol) if self.server else None
        instance = (details or {}).get("application_instance")
        return instance is None or instance.done()

    async def drain(self, sockets: list) -> None:
        try:
            # The runs stop at once; only the sockets' goodbyes are waited for.
            self.on_stop()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SHUTDOWN_DRAIN_SECONDS
            while loop.time() < deadline:
                if all(self.settled(s) for s in sockets):
                    break
                await asyncio.sleep(0.05)  # the clients' close answers, within a bound
            if self.flush is not None:
                await asyncio.wait_for(self.flush(), max(deadline - loop.time(), 0.5))
        except Exception:
            log.exception("graceful close failed")


STOP = GracefulStop()


def check() -> str | None:
    from daphne.server import Server  # under daphne only
    from daphne.ws_protocol import WebSocketProtocol  # under daphne only
    from twisted.internet import reactor  # under daphne only

    for owner, name in (
        (Server, "kill_all_applications"),
        (Server, "listen_success"),
        (WebSocketProtocol, "serverClose"),
    ):
        if not is_ours(getattr(owner, name, None)):
            return f"{owner.__name__}.{name} is not wrapped"
    for member in ("sendCloseFrame", "STATE_OPEN", "STATE_CLOSED"):
        if not hasattr(WebSocketProtocol, member):
            return f"daphne's WebSocketProtocol has no {member}"
    if "self.connections" not in source_of(Server, "self.connections"):
        return "daphne's Server keeps no connections"
    if not hasattr(reactor, "addSystemEventTrigger"):
        return "the reactor has no addSystemEventTrigger"
    return None
