"""What delivery needs of the ASGI server under it, as an interface of its
own: the server's adapter implements it (daphne's: ``server.patches.daphne_buffer``)
and the composition root plugs it in (``sessions_app.asgi.install_patches``),
so the delivery path never imports the module that patches the server.

- **A client gone.** A send to a client that has left raises; the delivery
  path ends that reader quietly (its disconnect follows), not as an error.
  ``except transport.GONE`` catches ``PeerGone`` and whatever the server
  raises for it (daphne: autobahn's ``Disconnected``).
- **The send buffer.** The server puts a probe in each scope's extensions
  under ``SEND_BUFFER_EXTENSION``: a callable answering how many bytes the
  connection's transport holds that the kernel has not taken yet, or -1 for
  a transport it cannot read. Flow control (``delivery.flow``) waits on it.
  Without the server's probe (another ASGI server), ``send_buffer_probe``
  answers None and the reader runs without flow control.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

SEND_BUFFER_EXTENSION = "sessions_app.send_buffer"


class PeerGone(Exception):
    """A send found its client gone."""


# Read at each ``except`` (``transport.GONE``), so a server plugged in later counts.
GONE: tuple[type[BaseException], ...] = (PeerGone,)


def _log_unreadable() -> None:
    log.error("a socket's transport has no send buffer the probe can read: no flow control")


_unreadable: list[Callable[[], None]] = [_log_unreadable]


def plug(
    *,
    gone: tuple[type[BaseException], ...] = (),
    unreadable: Callable[[], None] | None = None,
) -> None:
    """The server's side: the exceptions its send raises for a client gone,
    and what to do when its probe cannot read a transport (say it once)."""
    global GONE
    GONE = (PeerGone, *(kind for kind in gone if kind is not PeerGone))
    if unreadable is not None:
        _unreadable[0] = unreadable


def send_buffer_probe(scope: dict) -> Callable[[], int] | None:
    """The scope's probe, or None (no server probe, or one that cannot read
    this transport: reported, and the reader runs without flow control)."""
    probe = scope.get("extensions", {}).get(SEND_BUFFER_EXTENSION)
    if probe is None:
        return None
    if probe() < 0:
        _unreadable[0]()
        return None
    return probe
