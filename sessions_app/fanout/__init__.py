"""Fan-out of committed events and presence to every socket of a session.

All of it goes through the channel layer's groups, never through a registry of
sockets, so it reaches sockets on every server process sharing the layer.

Publishing is fire-and-forget from synchronous code (the ORM side): messages go
into one ordered queue drained by one coroutine on an event loop: the server's
own loop when one has been registered (daphne), otherwise a private loop on a
daemon thread (run workers, management commands). Order is kept per process
and per session; consumers are robust to loss and reordering anyway (they
refill holes from the log), so a publication can never make a client skip or
repeat an event.

The drain adapts to load: it takes everything queued at once, merges each
session's events into one group message (``session.events``, a list of
frames in seq order) and sends the sessions' messages concurrently. One run
streaming alone is published event by event; fifty runs in one worker are
published in a few channel-layer calls per round, instead of falling behind
one round trip per event; with the Redis layer, in one ``group_send_many``
(two round trips for the whole round).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from typing import Any

from channels.layers import get_channel_layer
from django.db import transaction

from sessions_app.server import metrics
from sessions_app.server.logs import Outage
from sessions_app.wire import frames

log = logging.getLogger(__name__)

EVENT_MESSAGE = "session.event"
EVENTS_MESSAGE = "session.events"
# At most this many queued messages are merged into one round.
MAX_BATCH = 2000
PRESENCE_MESSAGE = "session.presence"
ROTATED_MESSAGE = "session.rotated"
TITLE_MESSAGE = "session.title"
LIST_MESSAGE = "sessions.changed"
LOGGED_OUT_MESSAGE = "auth.logged_out"
REVOKED_MESSAGE = "auth.revoked"


def group_name(session_id: str) -> str:
    """The channel-layer group of one session (ids are URL-safe base64, valid here)."""
    return f"session.{session_id}"


def user_group(user_id: int) -> str:
    """The channel-layer group of one user's session-list sockets."""
    return f"user.{user_id}"


def rights_group(user_id: int) -> str:
    """The group of every socket of one user, told when the user's rights end
    (deactivated, deleted, password changed: ``rights``)."""
    return f"rights.{user_id}"


def token_group(token_id: str) -> str:
    """The group of every stream opened with one API token (told when it is revoked)."""
    return f"token.{token_id}"


def auth_group(session_key: str) -> str:
    """The group of every socket signed in with one session cookie (named by a
    hash: the key itself is a credential and group names reach Redis)."""
    return "auth." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def scope_auth_group(scope: dict) -> str | None:
    """``auth_group`` of a socket's session cookie, if it came with one."""
    session = scope.get("session")
    key = session.session_key if session is not None else None
    return auth_group(key) if key else None


class _Publisher:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._owned = False
        self._lock = threading.Lock()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Use ``loop`` (the server's) for publishing, if none is set yet."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._owned = False
                self._start_on(loop)

    def _start_on(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        queue_ready = threading.Event()

        def create() -> None:
            self._queue = asyncio.Queue()
            self._task = loop.create_task(self._drain(self._queue))
            queue_ready.set()

        if _running_loop() is loop:
            create()
        else:
            loop.call_soon_threadsafe(create)
            queue_ready.wait(5)

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="fanout-publisher", daemon=True
                )
                thread.start()
                self._start_on(loop)
                self._owned = True
            return self._loop

    async def _drain(self, queue: asyncio.Queue) -> None:
        while True:
            batch = [await queue.get()]
            while len(batch) < MAX_BATCH and not queue.empty():
                batch.append(queue.get_nowait())
            layer = get_channel_layer()
            queued_at = batch[0][2]  # the oldest of the round
            merged = merge([(group, message) for group, message, _ in batch])
            try:
                if hasattr(layer, "group_send_many"):
                    await _send_many(layer, merged)
                else:
                    await asyncio.gather(
                        *(send_group(layer, group, messages) for group, messages in merged)
                    )
            finally:
                metrics.PUBLISH_LAG_SECONDS.observe(time.monotonic() - queued_at)
                for _ in batch:
                    queue.task_done()

    def publish(self, group: str, message: dict[str, Any]) -> None:
        loop = self._ensure()
        item = (group, message, time.monotonic())
        if _running_loop() is loop:
            self._queue.put_nowait(item)
        else:
            loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything published so far has been handed to the channel
        layer (a stopping worker calls it before exit, so its last events reach
        the tabs at once rather than by their tail check). From another thread."""
        with self._lock:
            loop, queue = self._loop, self._queue
        if loop is None or queue is None or loop.is_closed() or _running_loop() is loop:
            return True
        try:
            asyncio.run_coroutine_threadsafe(queue.join(), loop).result(timeout)
        except TimeoutError:
            return False
        return True

    def reset(self) -> None:
        """Forget a server loop that was attached (tests run one loop per case).
        A private publishing thread is kept: it is bound to nothing else."""
        with self._lock:
            if not self._owned:
                self._loop = self._queue = self._task = None


def merge(batch: list[tuple[str, dict[str, Any]]]):
    """Per group, in order: runs of event messages become one ``session.events``
    (pure: what a busy publisher sends for one round of its queue)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for group, message in batch:
        out = groups.setdefault(group, [])
        if message["type"] == EVENT_MESSAGE:
            if out and out[-1]["type"] == EVENTS_MESSAGE:
                out[-1]["events"].append([message["seq"], message["text"]])
                continue
            if out and out[-1]["type"] == EVENT_MESSAGE:
                previous = out.pop()
                out.append(
                    {
                        "type": EVENTS_MESSAGE,
                        "session_id": previous["session_id"],
                        "events": [[previous["seq"], previous["text"]]],
                    }
                )
                out[-1]["events"].append([message["seq"], message["text"]])
                continue
        out.append(message)
    return groups.items()


# An outage of the layer fails every publication at once: one line for many
# (readers refill what was lost from the log), not a traceback each.
_outage = Outage(log)


async def _send_many(layer, merged) -> None:
    """Everything of a round in one batched layer call (the Redis layer's)."""
    items = [(group, message) for group, messages in merged for message in messages]
    try:
        await layer.group_send_many(items)
    except Exception as exc:
        _outage.error("publishing to the channel layer", exc, time.monotonic(), count=len(items))


async def send_group(layer, group: str, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        try:
            await layer.group_send(group, message)
        except Exception as exc:
            _outage.error("publishing to the channel layer", exc, time.monotonic())


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


publisher = _Publisher()


def publish_event(session_id: str, frame: dict[str, Any]) -> None:
    """Fan one committed event frame out to the session's sockets, serialised once."""
    publisher.publish(
        group_name(session_id),
        {
            "type": EVENT_MESSAGE,
            "session_id": session_id,
            "seq": frame["seq"],
            "text": frames.dumps(frame),
        },
    )


def publish_presence(session_id: str, viewers: int, running: bool, head: int) -> None:
    """Fan a presence update out to the session's sockets."""
    publisher.publish(
        group_name(session_id),
        {
            "type": PRESENCE_MESSAGE,
            "session_id": session_id,
            "viewers": viewers,
            "running": running,
            "head": head,
        },
    )


def title_changed_on_commit(owner_id: int, session_id: str, title: str) -> None:
    """Once the current transaction commits: the session's own sockets show the
    new title, and its owner's lists read the session again."""

    def publish() -> None:
        publisher.publish(
            group_name(session_id),
            {"type": TITLE_MESSAGE, "session_id": session_id, "title": title},
        )
        publish_session_changed(owner_id, session_id)

    transaction.on_commit(publish, robust=True)


def publish_rotation(session_id: str, epoch: str) -> None:
    """The session's epoch changed (to ``epoch``): its sockets close (1013) and
    resume, and are told ``epoch_mismatch``."""
    publisher.publish(
        group_name(session_id),
        {"type": ROTATED_MESSAGE, "session_id": session_id, "epoch": epoch},
    )


def publish_session_changed(owner_id: int, session_id: str) -> None:
    """Something the session list shows changed (status, title, approvals, a
    new session): its owner's list sockets read the session again."""
    publisher.publish(user_group(owner_id), {"type": LIST_MESSAGE, "session_id": session_id})


def session_changed_on_commit(owner_id: int, session_id: str) -> None:
    """``publish_session_changed`` once the current transaction commits."""
    transaction.on_commit(lambda: publish_session_changed(owner_id, session_id), robust=True)


def publish_logged_out(session_key: str) -> None:
    """Close every socket of a session cookie that was just signed out (4401)."""
    publisher.publish(auth_group(session_key), {"type": LOGGED_OUT_MESSAGE})


def publish_token_revoked(token_id: str) -> None:
    """End every stream opened with a token that was just revoked."""
    publisher.publish(token_group(token_id), {"type": REVOKED_MESSAGE})


def publish_revoked(user_id: int) -> None:
    """Close every socket of a user whose rights ended (4403, retryable)."""
    publisher.publish(rights_group(user_id), {"type": REVOKED_MESSAGE})
