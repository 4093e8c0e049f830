"""``GET /api/sessions/<id>/stream/``: a session's log as Server-Sent Events.

Read-only, for programs (and any ``EventSource``): each event of the log is
one SSE event, ``id: <seq>``, ``event: <kind>``, ``data: <the event frame>``
(exactly the socket's ``event`` frame; the framing is ``wire.sse``). It
starts after ``Last-Event-ID`` (an ``EventSource`` sends it by itself when it
reconnects) or, on a first request, after ``?after=N`` (default 0);
``?epoch=E`` (given in the ``stream`` event that opens every response) lets a
reconnect tell a rebuilt log from the one it followed; ``?compact=1`` skips
the superseded deltas of finished runs (``event: compacted``).

One dialect on the sockets' delivery stage: the response's delivery is
``delivery.reader.StreamReader`` (groups joined before the head is read,
replay, live in the ``Sequencer``'s order, flow control before every write,
the slot given back on every way out), its bytes ``wire.sse.NativeEncoder``.
This module is the HTTP side every streamed dialect shares: the per-user
slots and the response (docs/sse.md).

Who may ask is the one HTTP policy's (``web.policy``: the REST API's
pipeline, the session cookie or an ``Authorization: Token …`` header, the
rates), and ownership the REST API's: only the owner's sessions (another
user's is 404, like one that does not exist). Sends, decisions and cancels
stay on REST.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncIterator

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from sessions_app.delivery.reader import Follow, StreamReader
from sessions_app.delivery.standing import owned_row
from sessions_app.log.events import check_resume_cursor
from sessions_app.web.policy import Refused, admit
from sessions_app.wire import protocol as p
from sessions_app.wire import sse

# A slot taken for a response whose body has not started after this long is
# given back: Django neither closes nor starts a response whose client left
# while middleware ran after the view.
SLOT_START_SECONDS = 5.0


class Slots:
    """Streams open in this process, per user: at most
    ``AGENT_USER_MAX_SOCKETS`` each, as sockets (a stream holds what a socket
    holds). Taken in the view, given back once by whichever comes first: the
    body's end, the response's close (which Django calls from a thread, also
    when the client left before the body started), or ``SLOT_START_SECONDS``
    without the body starting."""

    def __init__(self) -> None:
        self.open: collections.Counter[int] = collections.Counter()
        self.lock = threading.Lock()

    def take(self, user_id: int, *, arm: bool = True) -> Slot | None:
        """A slot, or None past the limit. ``arm``: its start timer runs from
        now (else from ``Slot.arm``, when the response is made)."""
        with self.lock:
            if self.open[user_id] >= settings.AGENT_USER_MAX_SOCKETS:
                return None
            self.open[user_id] += 1
        slot = Slot(self, user_id)
        if arm:
            slot.arm()
        return slot


class Slot:
    def __init__(self, slots: Slots, user_id: int) -> None:
        self.slots, self.user_id, self.held = slots, user_id, True
        self.lapse: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """Give the slot back if the body has not started in time."""
        if self.lapse is None and self.held:
            self.lapse = asyncio.get_running_loop().call_later(SLOT_START_SECONDS, self.release)

    def started(self) -> None:
        """The body runs: it gives the slot back itself, however it ends."""
        if self.lapse is not None:
            self.lapse.cancel()

    def release(self) -> None:
        with self.slots.lock:
            if not self.held:
                return
            self.held = False
            self.slots.open[self.user_id] -= 1
            if not self.slots.open[self.user_id]:
                del self.slots.open[self.user_id]


slots = Slots()


class StreamResponse(StreamingHttpResponse):
    """A stream's response: its close gives the slot back."""

    def __init__(self, body: AsyncIterator[bytes], slot: Slot | None = None) -> None:
        super().__init__(body, content_type="text/event-stream; charset=utf-8")
        self.slot = slot
        self["Cache-Control"] = "no-store"
        # nginx: pass each event on as it comes (docs/deployment.md).
        self["X-Accel-Buffering"] = "no"

    def close(self) -> None:
        if self.slot is not None:
            self.slot.release()
        super().close()


def _cursor(value: str | None) -> int | None:
    if value is None or value == "":
        return 0
    if not (value.isascii() and value.isdigit()) or len(value) > 19:
        return None
    return int(value)


# --- the view ---------------------------------------------------------------------


# Read-only: CSRF protects writes, and every other method is 405 here.
@csrf_exempt
async def session_stream(request: HttpRequest, session_id: str):
    """The view (see the module's comment)."""
    if request.method not in ("GET", "HEAD"):
        return Refused(405, "method_not_allowed", "the stream is read-only: GET it").response()
    try:
        who = await admit(request)  # the one HTTP policy: a stream counts as a request
    except Refused as refused:
        return refused.response()
    row = await owned_row(session_id, who.user.pk) if p.is_session_id(session_id) else None
    if row is None:
        return Refused(404, "not_found", "no such session").response()
    last = request.headers.get("Last-Event-ID")
    after = _cursor(last if last is not None else request.GET.get("after"))
    if after is None:
        return Refused(400, p.E_BAD_FRAME, "the cursor must be an integer from 0").response()
    compact = request.GET.get("compact") in ("1", "true")
    # Without an epoch a reconnect cannot tell a rebuilt log: it is trusted.
    # From 0 the client takes the log as it is now, whatever epoch it had.
    epoch = row["epoch"] if after == 0 else (request.GET.get("epoch") or row["epoch"])
    try:
        check_resume_cursor(row, after, epoch, compact)
    except p.Rejection as rejection:
        body = sse.reset(session_id, rejection.reason, rejection.message, **rejection.extra)
        return StreamResponse(_once(body))
    # Reserved now, not when the body starts: a burst cannot pass the check
    # together. Nothing is awaited from here to the response.
    slot = slots.take(who.user.pk)
    if slot is None:
        message = "too many streams of yours are open here: retry later"
        return Refused(429, "too_many_streams", message, Retry_After="5").response()
    follow = Follow(session_id, after, epoch, who.granted, who.token_id, compact)
    reader = StreamReader(request, follow, slot, sse.NativeEncoder())
    return StreamResponse(reader.body(), slot)


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body
