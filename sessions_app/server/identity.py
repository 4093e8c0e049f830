"""This process's identity: who holds a run's lease, which server owns a socket.

One value per process, made once at import. It is short enough for
``Run.worker`` and ``Connection.server_id`` whatever the hostname, and unique
across restarts (the pid alone is not: containers restart as pid 1).
"""

from __future__ import annotations

import os
import secrets
import socket

_WORKER_ID = f"{socket.gethostname()[:60]}:{os.getpid()}:{secrets.token_hex(3)}"


def worker_id() -> str:
    """This process's identity as a lease holder and socket server."""
    return _WORKER_ID
