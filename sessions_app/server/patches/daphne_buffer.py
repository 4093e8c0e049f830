"""daphne's side of ``delivery.transport``: each scope's send-buffer probe,
and the exception its send raises for a client gone.

Each WebSocket (and HTTP) scope gets a probe of the bytes its transport has
not handed to the kernel yet (Twisted's ``FileDescriptor`` ``dataBuffer`` /
``offset`` / ``_tempDataLen``, under TLS the wrapped transport's plus
``TLSMemoryBIOProtocol._appSendBuffer``), under the key delivery names, and a
WebSocket scope its ``scheme`` (``wss`` under daphne's own TLS, which leaves
it out). Without it a client that stops reading makes the server buffer
without bound.
"""

from __future__ import annotations

import functools
import weakref

from sessions_app.server.patches import registry
from sessions_app.server.patches.registry import is_ours, mark, report, source_of

try:  # daphne's own TLS wraps the socket's transport in this
    from twisted.protocols.tls import TLSMemoryBIOProtocol as _TLS
except ImportError:  # pragma: no cover - Twisted without TLS
    _TLS = None

try:  # what daphne's websocket raises when a send finds the client gone
    from autobahn.exception import Disconnected

    PEER_GONE: tuple[type[BaseException], ...] = (Disconnected,)
except ImportError:  # pragma: no cover - another ASGI server
    PEER_GONE = ()


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


def unreadable() -> None:
    """A socket's transport the probe cannot read: reported once a process
    (a server already serving cannot refuse), counted, logged."""
    if "send_buffer" not in registry.failures:
        report(
            "send_buffer", "a socket's transport has no buffer this probe can read", starting=False
        )


def install(extension: str) -> None:
    """Wrap daphne's ``Server.create_application``: the probe goes in each
    scope's extensions under ``extension`` (``delivery.transport``'s key)."""
    from daphne.server import Server  # under daphne only
    from twisted.internet.interfaces import ISSLTransport  # under daphne only

    if is_ours(Server.create_application):
        return
    original = Server.create_application

    def create_application(self, protocol, scope):
        if scope.get("type") in ("websocket", "http"):
            # (HTTP: the SSE stream's flow control.)
            probe = functools.partial(transport_buffered, weakref.ref(protocol))
            scope.setdefault("extensions", {})[extension] = probe
        # Daphne leaves a WebSocket scope's scheme out (ASGI then means
        # "ws"), under its own TLS too: the Origin check would refuse every
        # https page's socket.
        tls = ISSLTransport.providedBy(protocol.transport)
        if scope.get("type") == "websocket" and "scheme" not in scope and tls:
            scope["scheme"] = "wss"
        return original(self, protocol, scope)

    Server.create_application = mark(create_application)


def check() -> str | None:
    from daphne.server import Server  # under daphne only
    from twisted.internet.abstract import FileDescriptor  # under daphne only
    from twisted.protocols.tls import TLSMemoryBIOProtocol  # under daphne only

    if not is_ours(Server.create_application):
        return "daphne's Server.create_application is not wrapped"
    probe = FileDescriptor()
    for member in ("dataBuffer", "offset", "_tempDataLen"):
        if not hasattr(probe, member):
            return f"Twisted's FileDescriptor has no {member}"
    if "self._appSendBuffer" not in source_of(TLSMemoryBIOProtocol, "self._appSendBuffer"):
        return "Twisted's TLSMemoryBIOProtocol has no _appSendBuffer"
    return None
