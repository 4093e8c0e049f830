"""What every WebSocket of the app needs, in one base (``AppSocket``).

Both sockets, the session socket (``session.SessionConsumer``) and the list
socket (``listing.SessionListConsumer``), get from here, and only from
here:

- **Who it is.** The upgrade is answered first; the cookie's user is awaited
  (``auth.user_of``), bounded: a lookup that times out closes 1013, one that
  fails 1011 (both retryable), no user 4401. Every command is checked against
  the rights the socket was let in with (``rights``), and those rights are
  read once more, with the socket's next database read at least
  ``RIGHTS_READ_AFTER_SECONDS`` after its open.
- **Its groups.** The cookie's group (a logout closes 4401) is joined before
  the lookup, so a logout during it is seen; the user's rights group
  (``fanout.rights_group``: deactivation, a password change or deletion
  closes 4403, retryable, and the next upgrade's lookup decides) right after
  it. Every group the socket is in is joined again every third of the
  layer's ``group_expiry``, so a tab open for days never goes deaf, and left
  at the close.
- **Limits.** At most ``AGENT_USER_MAX_SOCKETS`` of a user's sockets of one
  kind per server process (4429, retryable); frames over
  ``protocol.MAX_FRAME_BYTES`` (4413) or over the rate (4429).
- **Flow control on every send.** ``send`` is the only way out, and it waits
  while the client has more than ``AGENT_SEND_BUFFER_BYTES`` unread; a client
  that reads nothing for ``AGENT_SLOW_CONSUMER_SECONDS`` is closed 4408,
  whatever the frame was: a replayed event, a live one, a ``pong`` or an
  ``error`` reply. What the server holds for one socket is so bounded.
- **Its close.** Counted once, under a label from a fixed set
  (``metrics.close_label``), whatever code a client chose.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from typing import Any, ClassVar

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from sessions_app import fanout
from sessions_app.access.auth import user_of
from sessions_app.delivery import transport
from sessions_app.delivery.core import Phase, check_transition
from sessions_app.delivery.flow import Flow
from sessions_app.server import metrics
from sessions_app.server.logs import Outage, SocketLog, is_outage
from sessions_app.wire import frames
from sessions_app.wire import protocol as p
from sessions_app.wire.rates import TokenBucket

log = logging.getLogger("sessions_app.sockets.session")

# How long after its open a socket reads its user's rights once more (with a
# tail check, the first that comes after this): after a reconnect storm, not
# during it (in the 2,000-socket storm those reads cost 0.2 s of 3.6).
RIGHTS_READ_AFTER_SECONDS = 5.0
# Every socket of a process meets a lost Redis host at once: one line for all.
_layer_failures = Outage(log)
_handler_failures = Outage(log)


class AppSocket(AsyncWebsocketConsumer):
    """The lifecycle, limits and flow control every socket of the app shares.

    A subclass implements ``authenticated`` (the user is known and allowed:
    join its own groups, send its first frames), ``on_frame`` (a frame within
    the limits), and may extend ``cleanup`` (after the groups are left)."""

    # Sockets of this kind open per user in this process (a count, not a
    # registry); each subclass gets its own counter.
    open_per_user: ClassVar[collections.Counter[int]] = collections.Counter()

    # For every log line (``logs.SocketLog``).
    connection_id: str | None = None
    session_id: str | None = None
    first_frame: str | None = None
    close_code: int | None = None
    user = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The socket's one state field (``delivery.TRANSITIONS``); everything
        # disconnect() undoes exists from the start, whatever the close interrupted.
        self.phase = Phase.CONNECTING
        self.groups_in: set[str] = set()
        self.joining: list[asyncio.Future] = []
        self.group_timer: asyncio.TimerHandle | None = None
        self.renewing: asyncio.Future | None = None
        self.counted_open = False
        self.counted_user: int | None = None
        self.disconnected = False

    @property
    def closing(self) -> bool:
        """Nothing more goes out: a close was sent, or the peer left."""
        return self.phase is Phase.CLOSING

    def to(self, phase: Phase) -> None:
        """Move to ``phase``: a declared transition, or ``PhaseError``."""
        if check_transition(self.phase, phase):
            self.log.debug(
                "connection %s: %s -> %s", self.connection_id, self.phase.value, phase.value
            )
            self.phase = phase

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.open_per_user = collections.Counter()

    @property
    def log(self) -> SocketLog:
        adapter = self.__dict__.get("_log")
        if adapter is None:
            adapter = self.__dict__["_log"] = SocketLog(log, self)
        return adapter

    # --- the lifecycle ---------------------------------------------------

    async def __call__(self, scope, receive, send) -> None:
        """Channels' consumer, which a failed channel-layer receive (a Redis
        host lost) ends with an exception and no ``disconnect()``: its slot,
        its count and its groups would never be given back, and the user
        locked out (4429) until a restart. Here the socket is closed 1011
        (retryable: the client resumes), its close cleaned up as any other,
        and the outage logged as one line for many, not a traceback each."""
        try:
            await super().__call__(scope, receive, send)
        except Exception as exc:
            if is_outage(exc):
                _layer_failures.error(
                    "a socket's channel layer receive",
                    exc,
                    asyncio.get_running_loop().time(),
                    connection_id=self.connection_id,
                )
            else:  # not an outage: a bug keeps its traceback
                self.log.exception("connection %s: the socket failed", self.connection_id)
            with contextlib.suppress(Exception):
                await self.close_with(p.CLOSE_INTERNAL_ERROR)
        finally:
            if not self.disconnected:
                await self.disconnect(self.close_code or p.CLOSE_INTERNAL_ERROR)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' dispatch hops to a thread (aclose_old_connections) before
        # every message: per event per socket, the largest cost of live
        # delivery. These sockets touch the database only through their pool
        # (``db_pool``), which closes old connections around each call
        # itself, so the hop buys nothing here.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        if message["type"] == "websocket.disconnect":
            await handler(message)
            return
        try:
            await handler(message)
        except transport.GONE:
            # The client closed while a reply was on its way: not an error; its
            # websocket.disconnect follows and cleans up.
            self.to(Phase.CLOSING)
        except Exception as exc:
            # A database or layer failure in the handshake, a push or live
            # delivery: close (1011, retryable) ourselves, so disconnect()
            # still runs its cleanup (counts, rows, groups) instead of daphne
            # dropping the consumer with none of it. An outage meets every
            # socket at once: one line for many; anything else its traceback.
            _handler_failures.failed(
                f"a socket's {message['type']}", exc, connection_id=self.connection_id
            )
            await self.close_with(p.CLOSE_INTERNAL_ERROR)

    async def connect(self) -> None:
        # The id the access log gave the connection (``server.access_log``):
        # every line of either socket carries it.
        self.connection_id = self.scope.get("connection_id")
        self.bucket = TokenBucket()
        self.flow = Flow(transport.send_buffer_probe(self.scope))
        await self.accept()
        metrics.SOCKETS_OPEN.inc()
        self.counted_open = True
        # The cookie's group before the user is known: a logout published
        # while the lookup runs still reaches this socket.
        cookie = fanout.scope_auth_group(self.scope)
        if cookie:
            self.join_soon(cookie)
        # Accepted first, so the lookup overlaps the client's first frame,
        # which waits meanwhile. Bounded (``auth.LOOKUP_TIMEOUT_SECONDS``): a
        # database too slow to answer is the server's fault, so the close is
        # a retryable one.
        try:
            self.user = await user_of(self.scope)
        except TimeoutError:
            self.log.warning("the user lookup timed out: closing 1013")
            await self.close_with(p.CLOSE_TRY_AGAIN)
            return
        except Exception:
            self.log.exception("the user lookup failed: closing 1011")
            await self.close_with(p.CLOSE_INTERNAL_ERROR)
            return
        if self.user is None or not self.user.is_authenticated:
            await self.close_with(p.CLOSE_NOT_AUTHENTICATED)
            return
        counts = type(self).open_per_user
        if counts[self.user.pk] >= settings.AGENT_USER_MAX_SOCKETS:
            # Retryable: another of the user's tabs may close; backoff spaces it.
            await self.close_with(p.CLOSE_RATE_LIMITED)
            return
        counts[self.user.pk] += 1
        self.counted_user = self.user.pk
        # What the user's rights were when this socket was let in: a command
        # is refused once they changed (``rights.still_granted``).
        self.granted = (self.user.pk, getattr(self.user, "password", ""))
        # The rights group is joined off the handshake's path: a revocation
        # missed in the moment before the join still finds every command
        # refused. Once in the group, the rights are read once more: a revocation
        # published between the cookie's lookup (shared, and up to seconds
        # old) and the join would otherwise never reach this socket. Each
        # socket reads them where it reads the database anyway (the session
        # socket with its first tail check, the list socket with its
        # snapshot), not in a read of its own: in a reconnect storm that
        # read cost 1.6 s of 5 (docs/benchmarks.md). Commands are checked
        # each time regardless (``rights.require``).
        self.rights_joined = self.join_soon(fanout.rights_group(self.user.pk))
        self.rights_checked = False
        self.rights_due = asyncio.get_running_loop().time() + RIGHTS_READ_AFTER_SECONDS
        self._schedule_group_renewal()
        if self.closing:
            return
        self.to(Phase.OPEN)
        await self.authenticated()

    async def authenticated(self) -> None:
        """The user is known and within the limits (overridden)."""

    async def disconnect(self, code: int) -> None:
        self.disconnected = True
        self.to(Phase.CLOSING)
        if self.counted_open:
            self.counted_open = False
            metrics.SOCKETS_OPEN.dec()
            self.close_code = self.close_code or code
            metrics.CLOSES.labels(metrics.close_label(self.close_code)).inc()
            self.log.info("connection %s: closed %s", self.connection_id, self.close_code)
        counted = self.counted_user
        if counted is not None:
            counts = type(self).open_per_user
            counts[counted] -= 1
            if not counts[counted]:
                del counts[counted]
            self.counted_user = None
        if self.group_timer is not None:
            self.group_timer.cancel()
        if self.renewing is not None:
            self.renewing.cancel()
            await _succeeded(self.renewing)  # a renewal half done is undone below
        await self.cleanup(code)
        # Each group on its own: one layer failure must not keep the others.
        for joined in list(self.joining):
            await _succeeded(joined)
        for group in list(self.groups_in):
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception as exc:  # its membership expires (group_expiry)
                _layer_failures.error(
                    "leaving a group", exc, asyncio.get_running_loop().time(), group=group
                )
        self.groups_in = set()
        await self.after_groups_left(code)

    async def cleanup(self, code: int) -> None:
        """Stop the socket's own work, before its groups are left (overridden)."""

    async def after_groups_left(self, code: int) -> None:
        """Record the close, once no group message can arrive (overridden)."""

    async def close_with(self, code: int) -> None:
        if self.closing:
            return
        self.to(Phase.CLOSING)
        # Recorded as the socket's close code: the peer may never answer the
        # close frame (a client that stopped reading), and daphne then reports 1006.
        self.close_code = code
        await self.close(code=code)

    # --- groups ----------------------------------------------------------

    async def join(self, group: str) -> None:
        # Kept before the join succeeds: a join that fails (a Redis host down)
        # is tried again at each renewal, and left at the close all the same.
        self.groups_in.add(group)
        await self.channel_layer.group_add(group, self.channel_name)

    async def leave(self, group: str) -> None:
        self.groups_in.discard(group)
        await self.channel_layer.group_discard(group, self.channel_name)

    def join_soon(self, group: str) -> asyncio.Future:
        """Join ``group`` without waiting for it (a failure is logged: the
        socket then only misses what that group would have told it)."""
        joined = asyncio.ensure_future(self.join(group))
        joined.add_done_callback(self._join_failed)
        self.joining.append(joined)
        return joined

    def rights_to_check(self, soon: bool = False) -> tuple[int, str] | None:
        """The rights to read with the socket's next database read, once its
        rights group is joined and until they were read once (None: none).
        Unless ``soon``, not before ``RIGHTS_READ_AFTER_SECONDS``: a reconnect
        storm's sockets read them after the storm, not during it."""
        if self.rights_checked or not self.rights_joined.done():
            return None
        if not soon and asyncio.get_running_loop().time() < self.rights_due:
            return None
        return self.granted

    def rights_seen(self, granted: bool | None) -> None:
        """That read happened (``granted`` None: they were not asked)."""
        if granted is not None:
            self.rights_checked = True

    async def rights_read(self, granted: bool | None) -> None:
        """What that read said: close 4403 if the rights are gone."""
        self.rights_seen(granted)
        if granted is False and not self.closing:
            await self.auth_revoked({"type": fanout.REVOKED_MESSAGE})

    def _join_failed(self, task: asyncio.Future) -> None:
        # An idle socket keeps no finished task (what 5,000 of them cost).
        self.joining.remove(task)
        if not task.cancelled() and task.exception() is not None:
            _layer_failures.error(
                "joining a group", task.exception(), asyncio.get_running_loop().time()
            )

    def _schedule_group_renewal(self) -> None:
        """Channel layers forget a group membership after ``group_expiry`` (a
        day by default): a tab open longer would silently stop receiving.
        Joining again refreshes it, well before it lapses."""
        expiry = getattr(self.channel_layer, "group_expiry", 86400)
        self.group_timer = asyncio.get_running_loop().call_later(
            max(expiry / 3, 0.1), self._renew_soon
        )

    def renew_groups_now(self) -> None:
        """Join every group again at once (a tail check refilled a lost
        publication, which a Redis host that restarted empty would cause)."""
        if self.group_timer is not None:
            self.group_timer.cancel()
            self._renew_soon()

    def _renew_soon(self) -> None:
        self.group_timer = None
        if not self.closing:
            self.renewing = asyncio.ensure_future(self._renew_groups())

    async def _renew_groups(self) -> None:
        failed = []
        for group in list(self.groups_in):
            if self.closing:
                return  # never joined again after the close
            try:  # each on its own: a Redis host down costs only its groups
                await self.channel_layer.group_add(group, self.channel_name)
            except Exception as exc:  # noqa: BLE001 (logged; tried again at the next renewal)
                failed.append(f"{group}: {exc!r}")
        if failed:
            self.log.warning("connection %s: renewing %s failed", self.connection_id, failed)
        if not self.closing:
            self._schedule_group_renewal()

    # --- what the groups tell every socket -------------------------------

    async def auth_logged_out(self, message: dict[str, Any]) -> None:
        """The cookie this socket was opened with was signed out (final)."""
        self.log.info("connection %s: signed out: closing 4401", self.connection_id)
        await self.close_with(p.CLOSE_NOT_AUTHENTICATED)

    async def auth_revoked(self, message: dict[str, Any]) -> None:
        """The user was deactivated, deleted, or their password changed: the
        rights this socket was let in with are gone. 4403 is retryable: the
        next upgrade's lookup lets in a cookie that still signs in (the
        browser where the password was changed) and refuses the others 4401."""
        self.log.info("connection %s: rights revoked: closing 4403", self.connection_id)
        await self.close_with(p.CLOSE_RIGHTS_CHANGED)

    # --- incoming frames -------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None):
        if self.closing:
            return
        size = len(bytes_data) if bytes_data is not None else len(text_data)
        if text_data is not None and p.MAX_FRAME_BYTES // 4 < size <= p.MAX_FRAME_BYTES:
            size = len(text_data.encode("utf-8"))
        if size > p.MAX_FRAME_BYTES:
            await self.close_with(p.CLOSE_TOO_LARGE)
            return
        if not self.bucket.take(asyncio.get_running_loop().time()):
            await self.close_with(p.CLOSE_RATE_LIMITED)
            return
        await self.on_frame(text_data, bytes_data)

    async def on_frame(self, text_data: str | None, bytes_data: bytes | None) -> None:
        """A frame within the size and rate limits (overridden)."""

    # --- outgoing frames -------------------------------------------------

    async def send(self, text_data=None, bytes_data=None, close=False) -> None:
        """Every frame this socket sends passes here, under flow control."""
        if self.closing:
            return
        # The common case without a coroutine of its own: nothing waits unread.
        if self.flow.pressed() and not await self.writable():
            return
        await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    async def send_frame(self, frame: dict[str, Any]) -> None:
        if self.closing:
            return
        text = frames.dumps(frame)
        if not p.is_unicode(text):
            # Something echoed a lone surrogate: escape it (still valid JSON)
            # rather than fail in the server's UTF-8 encoder.
            text = json.dumps(frame, separators=(",", ":"))
        await self.send(text_data=text)

    async def writable(self) -> bool:
        """Wait while the client has too much unread (``delivery.flow``); False
        once it was closed for reading nothing for too long (4408)."""
        if not self.flow.pressed() or await self.flow.writable(lambda: self.closing):
            return True
        if not self.closing:
            self.log.warning(
                "connection %s: closing a client that stopped reading (%s bytes unread)",
                self.connection_id,
                self.flow.unread(),
            )
            await self.close_with(p.CLOSE_SLOW_CONSUMER)
        return False


async def _succeeded(task: asyncio.Future) -> bool:
    """Wait for ``task``; did it succeed? (Its failure was logged by its callback.)"""
    try:
        await task
    except BaseException:
        return False
    return True
