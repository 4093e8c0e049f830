"""Socket liveness and presence: who follows a session, and is it running.

Every socket has a ``Connection`` row (diagnostics, and the viewer count).
Each server vouches for its open sockets' rows every ``TOUCH_SECONDS``
(``ConnectionToucher``); rows a dead server left behind stop counting after
``STALE_SECONDS`` (``close_stale_connections``, run by the sweeper).

Presence frames (``viewers``, ``running``, and the session's ``head`` so a
client can order them and notice events it has not seen) go to every socket
of a session when those change. Requests are coalesced per session: a burst of
joins or leaves within ``COALESCE_SECONDS`` costs one count and one broadcast,
not one per socket (N tabs joining one session would otherwise cost N²
frames).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.db import close_old_connections
from django.utils import timezone

from sessions_app import fanout
from sessions_app.models import AgentSession, Connection, Run
from sessions_app.server.logs import Outage

log = logging.getLogger(__name__)
_outage = Outage(log)

TOUCH_SECONDS = 10.0
STALE_SECONDS = 35.0
COALESCE_SECONDS = 0.2


def presence_of(session_id: str) -> dict | None:
    """The session's presence now: viewers, running and head (None if it is gone)."""
    head = AgentSession.objects.filter(id=session_id).values_list("head", flat=True).first()
    if head is None:
        return None
    return {
        "viewers": Connection.objects.filter(session_id=session_id, closed_at__isnull=True).count(),
        "running": Run.objects.filter(session_id=session_id, status__in=Run.ACTIVE).exists(),
        "head": head,
    }


def send_presence(session_id: str) -> None:
    """Push the session's presence to every socket following it, now."""
    now = presence_of(session_id)
    if now is not None:
        fanout.publish_presence(session_id, now["viewers"], now["running"], now["head"])


class _Coalescer(threading.Thread):
    """Sends each requested session's presence once per ``COALESCE_SECONDS``."""

    def __init__(self):
        super().__init__(name="presence", daemon=True)
        self._due: dict[str, float] = {}
        self._changed = threading.Condition()

    def request(self, session_id: str) -> None:
        with self._changed:
            if session_id not in self._due:
                self._due[session_id] = time.monotonic() + COALESCE_SECONDS
                self._changed.notify()

    def run(self) -> None:
        while True:
            with self._changed:
                while not self._due:
                    self._changed.wait()
                now = time.monotonic()
                ready = [sid for sid, at in self._due.items() if at <= now]
                if not ready:
                    self._changed.wait(min(self._due.values()) - now)
                    continue
                for sid in ready:
                    del self._due[sid]
            try:
                for sid in ready:
                    send_presence(sid)
            except Exception as exc:
                # Presence is advisory: a lost one is corrected by the next.
                _outage.failed("presence", exc, sessions=ready)
            finally:
                try:
                    close_old_connections()
                except Exception:
                    log.exception("closing the presence thread's connection failed")


_coalescer: _Coalescer | None = None
_coalescer_lock = threading.Lock()


def request_presence(session_id: str) -> None:
    """Send the session's presence soon, merged with other requests for it."""
    global _coalescer
    with _coalescer_lock:
        if _coalescer is None or not _coalescer.is_alive():
            _coalescer = _Coalescer()
            _coalescer.start()
    _coalescer.request(session_id)


# --- liveness of socket rows ---------------------------------------------------


def touch_connections(server_id: str) -> None:
    """Vouch for this server's open sockets (see ``Connection.seen_at``)."""
    Connection.objects.filter(server_id=server_id, closed_at__isnull=True).update(
        seen_at=timezone.now()
    )


def close_stale_connections() -> list[str]:
    """Close socket rows of servers that died, and re-announce presence."""
    stale = Connection.objects.filter(
        closed_at__isnull=True,
        seen_at__lt=timezone.now() - timedelta(seconds=STALE_SECONDS),
    )
    sessions = sorted({sid for sid in stale.values_list("session_id", flat=True) if sid})
    stale.update(closed_at=timezone.now(), clean=False)
    for session_id in sessions:
        request_presence(session_id)
    return sessions


class ConnectionToucher(threading.Thread):
    """A server's heartbeat for its sockets' rows."""

    def __init__(self, server_id: str):
        super().__init__(name="connection-toucher", daemon=True)
        self.server_id = server_id
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(TOUCH_SECONDS):
            try:
                touch_connections(self.server_id)
            except Exception as exc:
                _outage.failed("touching connections", exc)
            finally:
                close_old_connections()
