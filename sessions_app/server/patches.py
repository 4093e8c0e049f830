"""Every reach into a third-party package's internals, in one place, checked.

The fast path depends on members that daphne, Twisted, autobahn and
channels_redis do not promise to keep:

- ``send_buffer``: each WebSocket scope gets its ``scheme`` (``wss`` under
  daphne's own TLS, which leaves it out) and a probe of the bytes its
  transport has not handed to the kernel yet (Twisted's ``FileDescriptor``
  ``dataBuffer`` / ``offset`` / ``_tempDataLen``, under TLS the wrapped
  transport's plus ``TLSMemoryBIOProtocol._appSendBuffer``), read by the
  sockets' flow control (``sockets.base``). Without it a client that stops
  reading makes the server buffer without bound.
- ``graceful_stop``: daphne's ``Server.kill_all_applications``,
  ``listen_success`` and ``WebSocketProtocol.serverClose`` are wrapped, so a
  stop (SIGTERM too) closes every socket 1012 and waits for the consumers.
- ``autobahn_hltype``: ``autobahn.websocket.protocol.hltype`` formats debug
  text on every frame written, and its ``pformat`` some 40 options on every
  connection made; with debug logging off they are replaced.
- ``channels_redis``: ``layers.BatchReceiveRedisChannelLayer`` uses the
  parent's private members (``_group_key``, ``consistent_hash``, ``connection``,
  ``non_local_name``, ``BoundedQueue``, ...).

Each package is pinned in ``pyproject.toml`` (``PINNED`` here is the same list);
an upgrade is a deliberate change, tested. At start-up (``install``, from the
ASGI module) each patch is applied and then checked: the member it reaches
for exists, the wrapper is in place. A check that fails is reported by
``AGENT_PATCH_FAILURES``: ``"refuse"`` (the default) raises
``ImproperlyConfigured`` naming it, so the server does not start with a guard
silently off; ``"warn"`` logs an error and counts it in
``agent_patch_failures_total{patch=…}`` and runs on. The probe is checked once
more on each socket, where a transport exists to read: one of a shape it
does not know is logged as an error and counted (once per process; a server
already serving cannot refuse), and that socket runs without flow control.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import inspect
import logging
import signal
import sys
import weakref
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from sessions_app.server import exit_watch, metrics
from sessions_app.wire import protocol as p

log = logging.getLogger(__name__)

# The versions whose internals were read and tested (pyproject.toml pins them).
PINNED = {
    "daphne": "4.2.3",
    "twisted": "26.10.0",
    "autobahn": "26.11.1",
    "channels": "4.3.2",
    "channels-redis": "4.3.0",
}

SEND_BUFFER_EXTENSION = "sessions_app.send_buffer"
# Codes autobahn's sendClose refuses though the protocol uses them.
_REGISTERED_SERVER_CODES = (p.CLOSE_INTERNAL_ERROR, p.CLOSE_SERVICE_RESTART, p.CLOSE_TRY_AGAIN)

try:  # daphne's own TLS wraps the socket's transport in this
    from twisted.protocols.tls import TLSMemoryBIOProtocol as _TLS
except ImportError:  # pragma: no cover - Twisted without TLS
    _TLS = None

try:  # what daphne's websocket raises when a send finds the client gone
    from autobahn.exception import Disconnected as PeerGone
except ImportError:  # pragma: no cover - another ASGI server

    class PeerGone(Exception):  # type: ignore[no-redef]
        pass


class PatchFailed(ImproperlyConfigured):
    """A patch of a third-party internal did not take hold."""


# name -> what went wrong, for every check that failed in this process.
failures: dict[str, str] = {}


def report(name: str, problem: str, *, starting: bool = True) -> None:
    """A patch did not take hold: refuse to run (only while ``starting``: a
    server already serving cannot refuse), or say so loudly."""
    failures[name] = problem
    message = (
        f"the {name} patch did not take hold: {problem} "
        f"(versions tested: {', '.join(f'{k} {v}' for k, v in PINNED.items())})"
    )
    metrics.PATCH_FAILURES.labels(name).inc()
    if starting and settings.AGENT_PATCH_FAILURES == "refuse":
        raise PatchFailed(message + "; set AGENT_PATCH_FAILURES=warn to run without it")
    log.error("%s: running WITHOUT it", message)


def source_of(obj, assumed: str) -> str:
    """``obj``'s source, to look for the members a patch reads; where the
    sources are not installed (bytecode only), ``assumed`` (the check cannot
    look, and says so once in the log)."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        log.warning("no source for %r: its members are assumed, not checked", obj)
        return assumed


def check_versions() -> list[str]:
    """The pinned packages installed at another version (logged, not refused:
    the member checks below decide)."""
    drift = []
    for package, version in PINNED.items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed != version:
            drift.append(f"{package} {installed} (tested: {version})")
    if drift:
        log.warning("third-party versions differ from the tested ones: %s", ", ".join(drift))
    return drift


def install(*, on_stop: Callable[[], None] | None = None, drain=None) -> None:
    """Under daphne: apply and check every patch. Elsewhere only the channel
    layer's members are checked (they matter wherever Redis is the layer).

    ``on_stop`` runs first at a graceful stop (the ASGI module passes the
    runtime's ``abort_all``) and ``drain``, a coroutine function, last, after
    the sockets' goodbyes (the socket rows' ``flush``): this module knows the
    servers it patches, not the app's stages above it. A hook not given keeps
    the one set before (``sessions_app.asgi.install_patches`` gives both)."""
    if on_stop is not None:
        _stop_hooks[0] = on_stop
    if drain is not None:
        _stop_hooks[1] = drain
    check_versions()
    check_channels_redis()
    check_in_memory_layer()
    if "daphne.server" not in sys.modules:
        return
    for name, apply, check in (
        ("send_buffer", _install_send_buffer_probe, check_send_buffer),
        ("graceful_stop", _install_graceful_stop, check_graceful_stop),
        ("autobahn_hltype", _skip_autobahn_debug_formatting, check_hltype),
    ):
        try:
            apply()
            problem = check()
        except PatchFailed:
            raise
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            report(name, problem)


# --- channels_redis ---------------------------------------------------------

_REDIS_LAYER_MEMBERS = (
    "_group_key",
    "consistent_hash",
    "connection",
    "non_local_name",
    "serialize",
    "deserialize",
    "get_capacity",
    "require_valid_group_name",
    "require_valid_channel_name",
)


def check_channels_redis() -> None:
    try:
        from channels_redis import core  # checked only where it is installed
    except ImportError:  # pragma: no cover - the layer is a dependency
        return
    missing = [m for m in _REDIS_LAYER_MEMBERS if not hasattr(core.RedisChannelLayer, m)]
    if not hasattr(core, "BoundedQueue"):
        missing.append("BoundedQueue")
    if missing:
        report("channels_redis", "RedisChannelLayer lacks " + ", ".join(missing))


def check_in_memory_layer() -> None:
    """``layers.LocalChannelLayer`` sweeps through Channels' in-memory layer's
    ``_clean_expired`` and reads its ``channels`` and ``groups``."""
    from channels.layers import InMemoryChannelLayer  # read for the check only

    source = source_of(InMemoryChannelLayer, "self.channels = self.groups =")
    missing = [m for m in ("channels", "groups") if f"self.{m} =" not in source]
    if not hasattr(InMemoryChannelLayer, "_clean_expired"):
        missing.append("_clean_expired")
    if missing:
        report("in_memory_layer", "InMemoryChannelLayer lacks " + ", ".join(missing))


# --- the send-buffer probe --------------------------------------------------


def transport_buffered(protocol_ref) -> int:
    """Bytes written to a socket's transport that the kernel has not taken
    yet; -1 for a transport of a shape this does not know."""
    protocol = protocol_ref()
    transport = getattr(protocol, "transport", None)
    if transport is None:
        return 0
    pending = 0
    # TLS (daphne's own ``ssl:`` endpoint): the cleartext the wrapper holds
    # (before its handshake), then the ciphertext in the socket's transport.
    # (The wrapper passes unknown attributes through, ``dataBuffer`` too, so
    # it is told by its class, not by what it seems to have.)
    while _TLS is not None and isinstance(transport, _TLS):
        pending += sum(len(chunk) for chunk in transport._appSendBuffer)
        transport = getattr(transport, "transport", None)
        if transport is None:
            return pending
    if not hasattr(transport, "dataBuffer"):
        return -1
    if getattr(transport, "disconnected", False):
        # Twisted keeps the unsent bytes of a lost connection: nobody will
        # read them, and a send that waited for them would wait in vain.
        return 0
    # Twisted's FileDescriptor keeps what it could not write yet in these.
    pending += len(transport.dataBuffer) - transport.offset
    return pending + transport._tempDataLen


def send_buffer_probe(scope: dict) -> Callable[[], int] | None:
    """The scope's probe (None outside daphne); a transport it cannot read is
    reported at once, and the probe then answers 0."""
    probe = scope.get("extensions", {}).get(SEND_BUFFER_EXTENSION)
    if probe is None:
        return None
    if probe() < 0:
        if "send_buffer" not in failures:
            report(
                "send_buffer",
                "a socket's transport has no buffer this probe can read",
                starting=False,
            )
        return None
    return probe


def _install_send_buffer_probe() -> None:
    from daphne.server import Server  # under daphne only
    from twisted.internet.interfaces import ISSLTransport  # under daphne only

    if getattr(Server.create_application, "_sessions_app", False):
        return
    original = Server.create_application

    def create_application(self, protocol, scope):
        if scope.get("type") in ("websocket", "http"):
            # (HTTP: the SSE stream's flow control, ``web.stream``.)
            probe = functools.partial(transport_buffered, weakref.ref(protocol))
            scope.setdefault("extensions", {})[SEND_BUFFER_EXTENSION] = probe
        # Daphne leaves a WebSocket scope's scheme out (ASGI then means
        # "ws"), under its own TLS too: the Origin check would refuse every
        # https page's socket.
        tls = ISSLTransport.providedBy(protocol.transport)
        if scope.get("type") == "websocket" and "scheme" not in scope and tls:
            scope["scheme"] = "wss"
        return original(self, protocol, scope)

    create_application._sessions_app = True
    Server.create_application = create_application


def check_send_buffer() -> str | None:
    from daphne.server import Server  # under daphne only
    from twisted.internet.abstract import FileDescriptor  # under daphne only
    from twisted.protocols.tls import TLSMemoryBIOProtocol  # under daphne only

    if not getattr(Server.create_application, "_sessions_app", False):
        return "daphne's Server.create_application is not wrapped"
    probe = FileDescriptor()
    for member in ("dataBuffer", "offset", "_tempDataLen"):
        if not hasattr(probe, member):
            return f"Twisted's FileDescriptor has no {member}"
    if "self._appSendBuffer" not in source_of(TLSMemoryBIOProtocol, "self._appSendBuffer"):
        return "Twisted's TLSMemoryBIOProtocol has no _appSendBuffer"
    return None


# --- autobahn's debug formatting ------------------------------------------


def _plain_name(obj) -> str:
    return getattr(obj, "__qualname__", "")


def _skip_autobahn_debug_formatting() -> None:
    """autobahn formats the arguments of a debug log line on every frame it
    writes (``hltype(self.sendData)``, coloured text), whether or not debug
    logging is on: 7% of a long replay's time in a profile. Those lines only
    name the function, so with debug off the name is left unformatted. Each
    connection made pretty-prints its ~40 options for another debug line
    (``pformat`` in ``_connectionMade``: 4% of a reconnect storm's event loop):
    ``repr`` says the same, ten times faster."""
    from autobahn.websocket import protocol  # under daphne only

    if logging.getLogger("autobahn").isEnabledFor(logging.DEBUG):
        return
    # Each on its own: one gone leaves the other replaced (the check names it).
    for member, fast in (("hltype", _plain_name), ("pformat", repr)):
        if hasattr(protocol, member):
            setattr(protocol, member, fast)


def check_hltype() -> str | None:
    from autobahn.websocket import protocol  # under daphne only

    if logging.getLogger("autobahn").isEnabledFor(logging.DEBUG):
        return None  # left alone on purpose
    for member, fast in (("hltype", _plain_name), ("pformat", repr)):
        if getattr(protocol, member, None) is not fast:
            return f"autobahn.websocket.protocol.{member} is not replaced"
    for method, call in ((protocol.WebSocketProtocol.sendData, "hltype("),
                         (protocol.WebSocketProtocol._connectionMade, "pformat(")):  # fmt: skip
        if call not in source_of(method, call):
            return f"WebSocketProtocol.{method.__name__} no longer calls {call[:-1]} (no gain)"
    return None


# --- the graceful stop ------------------------------------------------------

# How long a graceful stop waits for its clients to answer the 1012 closes
# before daphne cancels what is left.
SHUTDOWN_DRAIN_SECONDS = 5.0

_daphne_server = None  # daphne's Server, once it listens
_stop_hooks: list = [lambda: None, None]  # set by install(): (on_stop, drain)


def _install_graceful_stop() -> None:
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
    from daphne.server import Server  # under daphne only
    from daphne.ws_protocol import WebSocketProtocol  # under daphne only
    from twisted.internet import defer, reactor  # under daphne only

    if getattr(Server.kill_all_applications, "_sessions_app", False):
        return

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
    WebSocketProtocol.serverClose = mark(server_close)
    draining: list[asyncio.Future] = []
    original_kill = Server.kill_all_applications

    def kill_all_applications(self):
        if not draining:
            return original_kill(self)
        waited = defer.Deferred.fromFuture(draining[0])
        waited.addBoth(lambda _: original_kill(self))
        return waited

    Server.kill_all_applications = mark(kill_all_applications)
    ports: list = []  # what daphne listens on, to stop taking upgrades at a stop
    original_listen_success = Server.listen_success

    def listen_success(self, port):
        global _daphne_server
        _daphne_server = self  # once listening, before any application
        ports.append(port)
        return original_listen_success(self, port)

    Server.listen_success = mark(listen_success)
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
                protocol.serverClose(code=p.CLOSE_SERVICE_RESTART)
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
            on_stop, flush = _stop_hooks
            # The runs stop at once; only the sockets' goodbyes are waited for.
            on_stop()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SHUTDOWN_DRAIN_SECONDS
            while loop.time() < deadline:
                if all(settled(p) for p in sockets):
                    break
                await asyncio.sleep(0.05)  # the clients' close answers, within a bound
            if flush is not None:
                await asyncio.wait_for(flush(), max(deadline - loop.time(), 0.5))
        except Exception:
            log.exception("graceful close failed")

    reactor.addSystemEventTrigger("before", "shutdown", close_all)
    reactor.addSystemEventTrigger("after", "shutdown", exit_watch.exit_after)


def check_graceful_stop() -> str | None:
    from daphne.server import Server  # under daphne only
    from daphne.ws_protocol import WebSocketProtocol  # under daphne only
    from twisted.internet import reactor  # under daphne only

    for owner, name in (
        (Server, "kill_all_applications"),
        (Server, "listen_success"),
        (WebSocketProtocol, "serverClose"),
    ):
        if not getattr(getattr(owner, name, None), "_sessions_app", False):
            return f"{owner.__name__}.{name} is not wrapped"
    for member in ("sendCloseFrame", "STATE_OPEN", "STATE_CLOSED"):
        if not hasattr(WebSocketProtocol, member):
            return f"daphne's WebSocketProtocol has no {member}"
    if "self.connections" not in source_of(Server, "self.connections"):
        return "daphne's Server keeps no connections"
    if not hasattr(reactor, "addSystemEventTrigger"):
        return "the reactor has no addSystemEventTrigger"
    return None


def mark(function: Any) -> Any:
    """Mark a wrapper as ours (what the checks look for)."""
    function._sessions_app = True
    return function
