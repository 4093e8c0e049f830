"""Every reach into a third-party package's internals, one module per thing
patched, each with its check:

- ``daphne_buffer``: each scope's send-buffer probe and ``wss`` scheme, and
  the exception daphne's send raises for a client gone: daphne's side of
  ``delivery.transport`` (plugged in by ``sessions_app.asgi``);
- ``daphne_stop``: the graceful stop (every socket closed 1012, the
  consumers waited for; SIGTERM too), a ``GracefulStop``;
- ``autobahn_debug``: autobahn's debug formatting skipped while debug
  logging is off;
- ``channels_layers``: the members of channels_redis and of Channels'
  in-memory layer that ``fanout.layers`` builds on (read, not patched).

Each package is pinned in ``pyproject.toml`` (``registry.PINNED`` is the same
list); an upgrade is a deliberate change, tested. At start-up (``install``,
from the ASGI module) each patch is applied and then checked: the member it
reaches for exists, the wrapper is in place. A check that fails is reported
by ``AGENT_PATCH_FAILURES``: ``"refuse"`` (the default) raises
``ImproperlyConfigured`` naming it, so the server does not start with a
guard silently off; ``"warn"`` logs an error and counts it in
``agent_patch_failures_total{patch=…}`` and runs on. The probe is checked
once more on each socket, where a transport exists to read: one of a shape
it does not know is logged as an error and counted (once per process; a
server already serving cannot refuse), and that socket runs without flow
control.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable

from sessions_app.server.patches import autobahn_debug, daphne_buffer, daphne_stop
from sessions_app.server.patches.channels_layers import (
    check_channels_redis,
    check_in_memory_layer,
)
from sessions_app.server.patches.registry import PatchFailed, check_versions, report


def install(
    *,
    buffer_extension: str,
    on_stop: Callable[[], None] | None = None,
    drain: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Under daphne: apply and check every patch. Elsewhere only the channel
    layers' members are checked (they matter wherever they are the layer).

    ``buffer_extension``: the scope extension the send-buffer probe goes in
    (``delivery.transport``'s). ``on_stop`` runs first at a graceful stop
    (the ASGI module passes the runtime's ``abort_all``) and ``drain``, a
    coroutine function, last, after the sockets' goodbyes (the socket rows'
    ``flush``): this package knows the servers it patches, not the app's
    stages above it. A hook not given keeps the one set before."""
    if on_stop is not None:
        daphne_stop.STOP.on_stop = on_stop
    if drain is not None:
        daphne_stop.STOP.flush = drain
    check_versions()
    check_channels_redis()
    check_in_memory_layer()
    if "daphne.server" not in sys.modules:
        return
    for name, apply, check in (
        (
            "send_buffer",
            functools.partial(daphne_buffer.install, buffer_extension),
            daphne_buffer.check,
        ),
        ("graceful_stop", daphne_stop.STOP.install, daphne_stop.check),
        ("autobahn_hltype", autobahn_debug.install, autobahn_debug.check),
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
