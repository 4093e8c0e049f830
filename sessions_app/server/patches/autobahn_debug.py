"""autobahn's debug formatting, skipped while debug logging is off."""

from __future__ import annotations

import logging

from sessions_app.server.patches.registry import source_of


def _plain_name(obj) -> str:
    return getattr(obj, "__qualname__", "")


def install() -> None:
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


def check() -> str | None:
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
