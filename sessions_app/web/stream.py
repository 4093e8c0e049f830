"""``GET /api/sessions/<id>/stream/``: a session's log as Server-Sent Events.

Read-only, for programs (and any ``EventSource``): each event of the log is
one SSE event, ``id: <seq>``, ``event: <kind>``, ``data: <the event frame>``
(exactly the socket's ``event`` frame). It starts after ``Last-Event-ID`` (an
``EventSource`` sends it by itself when it reconnects) or, on a first
request, after ``?after=N`` (default 0); ``?epoch=E`` (the session's epoch,
given in the ``stream`` event that opens every response) lets a reconnect
tell a rebuilt log from the one it followed; ``?compact=1`` skips the
superseded deltas of finished runs (``event: compacted``, as the socket's
``compact`` extension).

The same log path as the socket: the stream joins the session's group
first, replays from the database up to the head, then goes live, dropping
what it already sent and refilling any hole from the log, so there is no gap
and no repeat at the boundary. While idle it sends a comment every
``AGENT_SSE_HEARTBEAT_SECONDS`` and checks the head and the user's rights.
It ends with ``event: reset`` (data: a ``resume_rejected`` frame) when the
cursor cannot be honoured or the log was rebuilt, and a client then starts
again as that reason says (docs/sse.md). A client
that stops reading is dropped as a slow socket is, and may come back.

Auth and ownership are the REST API's: the session cookie or an
``Authorization: Token …`` header, and only the owner's sessions (another
user's is 404, like one that does not exist). Sends, decisions and cancels
stay on REST.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from sessions_app import fanout
from sessions_app.access.rights import still_granted
from sessions_app.log.compaction import compacted_plan
from sessions_app.log.events import check_resume_cursor, read_frames
from sessions_app.models import AgentSession
from sessions_app.server.db_pool import reading_in_db_pool
from sessions_app.server.patches import send_buffer_probe
from sessions_app.wire import frames
from sessions_app.wire import protocol as p
from sessions_app.wire.ranges import Compacted, Refill, Send, interleave

PAGE = 500
_ROW = ("epoch", "head", "earliest", "compacted_through")
# Streams open in this process, per user: at most AGENT_USER_MAX_SOCKETS each,
# as sockets (a stream holds what a socket holds: a channel, a response).
_open: collections.Counter = collections.Counter()


# --- the database, on the sockets' pool --------------------------------------------


@reading_in_db_pool
def _owned(session_id: str, user_id: int) -> dict[str, Any] | None:
    found = AgentSession.objects.filter(id=session_id, owner_id=user_id).values_list(*_ROW).first()
    return None if found is None else dict(zip(_ROW, found, strict=True))


@reading_in_db_pool
def _page(session_id: str, after: int, upto: int, skeleton: bool) -> list[tuple[str, int]]:
    return read_frames(session_id, after, upto, PAGE, skeleton=skeleton)


@reading_in_db_pool
def _plan(session_id: str, after: int, upto: int) -> list[tuple[int, int, str]]:
    return compacted_plan(session_id, after, upto)


@reading_in_db_pool
def _tail(session_id: str, granted: tuple[int, str]) -> tuple[tuple[int, str] | None, bool]:
    row = AgentSession.objects.filter(id=session_id).values_list("head", "epoch").first()
    return row, still_granted(granted)


def _token_user(header: str):
    from rest_framework.authtoken.models import Token

    key = header.split(None, 1)[1].strip() if " " in header else ""
    token = Token.objects.select_related("user").filter(key=key).first()
    return token.user if token is not None and token.user.is_active else None


_token_user_in_pool = reading_in_db_pool(_token_user)


# --- SSE framing ----------------------------------------------------------------


def sse(event: str, data: str, event_id: int | None = None, retry: int | None = None) -> bytes:
    """One SSE event (``data`` is one line of JSON: no newline to split);
    ``retry``: how long a client waits before it reconnects, in ms."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    if retry is not None:
        head = f"retry: {retry}\n{head}"
    return f"{head}event: {event}\ndata: {data}\n\n".encode()


def sse_frame(text: str, seq: int) -> bytes:
    """An ``event`` frame's text as its SSE event: ``id`` its seq, ``event`` its kind."""
    return sse(json.loads(text)["kind"], text, seq)


def _cursor(value: str | None) -> int | None:
    if value is None or value == "":
        return 0
    if not (value.isascii() and value.isdigit()) or len(value) > 19:
        return None
    return int(value)


def _problem(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status)


# --- the view ---------------------------------------------------------------------


# Read-only: CSRF protects writes, and every other method is 405 here.
@csrf_exempt
async def session_stream(request: HttpRequest, session_id: str):
    """The view (see the module's comment)."""
    if request.method not in ("GET", "HEAD"):
        return _problem("method_not_allowed", "the stream is read-only: GET it", 405)
    user = await _user(request)
    if user is None:
        return _problem("not_authenticated", "sign in, or send Authorization: Token …", 403)
    row = await _owned(session_id, user.pk) if p.is_session_id(session_id) else None
    if row is None:
        return _problem("not_found", "no such session", 404)
    last = request.headers.get("Last-Event-ID")
    after = _cursor(last if last is not None else request.GET.get("after"))
    if after is None:
        return _problem(p.E_BAD_FRAME, "the cursor must be an integer from 0", 400)
    compact = request.GET.get("compact") in ("1", "true")
    epoch = request.GET.get("epoch") or (row["epoch"] if after == 0 else None)
    if _open[user.pk] >= settings.AGENT_USER_MAX_SOCKETS:
        response = _problem(
            "too_many_streams", "too many streams of yours are open here: retry later", 429
        )
        response["Retry-After"] = "5"
        return response
    granted = (user.pk, getattr(user, "password", ""))
    # Reserved now, not when the body starts: a burst cannot pass the check together.
    _open[user.pk] += 1
    stream = _Stream(request, session_id, granted, after, compact)
    try:
        # Without an epoch a reconnect cannot tell a rebuilt log: trust it.
        check_resume_cursor(row, after, epoch or row["epoch"], compact)
    except p.Rejection as rejection:
        _open[user.pk] -= 1
        body = stream.reset(rejection.reason, rejection.message, **rejection.extra)
        return _response(_once(body))
    return _response(stream.events(row))


def _response(body: AsyncIterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(body, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-store"
    # nginx: pass each event on as it comes (docs/deployment.md).
    response["X-Accel-Buffering"] = "no"
    return response


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def _user(request: HttpRequest):
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("token "):
        return await _token_user_in_pool(header)
    user = await request.auser()
    return user if user.is_authenticated and user.is_active else None


class _Stream:
    """One response: what it sent (``sent``), and how it goes on."""

    def __init__(self, request, session_id: str, granted, after: int, compact: bool):
        self.session_id = session_id
        self.granted = granted
        self.sent = after
        self.compact = compact
        self.probe = send_buffer_probe(getattr(request, "scope", {}))
        self.slow_since: float | None = None

    def reset(self, reason: str, message: str, **extra: Any) -> bytes:
        """The terminal event: a ``resume_rejected`` frame (and a long retry,
        so a client that ignores it does not come back at once)."""
        frame = {
            "type": p.RESUME_REJECTED,
            "session_id": self.session_id,
            "reason": reason,
            "message": message,
            **extra,
        }
        return sse("reset", frames.dumps(frame), retry=60_000)

    async def events(self, row: dict[str, Any]) -> AsyncIterator[bytes]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        groups = [fanout.group_name(self.session_id), fanout.rights_group(self.granted[0])]
        for group in groups:
            await layer.group_add(group, channel)
        try:
            # The head once joined: what is appended from here on also comes
            # live (a repeat is dropped by its seq), so nothing falls between.
            state, _ = await _tail(self.session_id, self.granted)
            head = row["head"] if state is None else state[0]
            opening = {"session_id": self.session_id, "epoch": row["epoch"], "head": head}
            yield sse("stream", frames.dumps(opening), retry=1000)
            async for chunk in self._replay(head):
                yield chunk
            async for chunk in self._live(layer, channel, row["epoch"]):
                yield chunk
        finally:
            _open[self.granted[0]] -= 1
            for group in groups:
                await layer.group_discard(group, channel)

    async def _replay(self, head: int) -> AsyncIterator[bytes]:
        """Everything after the cursor up to ``head``, from the log."""
        plan = await _plan(self.session_id, self.sent, head) if self.compact else []
        superseded = {first: (last, run_id) for first, last, run_id in plan}
        while self.sent < head:
            page = await _page(self.session_id, self.sent, head, bool(plan))
            if not page:
                # The rest is deltas of a run still streaming (or purged: the
                # tail check says so): sent as they are.
                async for chunk in self._range(head):
                    yield chunk
                return
            for action in interleave(self.sent, page, superseded) if plan else _sends(page):
                if isinstance(action, Compacted):
                    frame = frames.compacted_frame(
                        self.session_id, action.first, action.last, action.run_id
                    )
                    yield sse(p.COMPACTED, frames.dumps(frame), action.last)
                    self.sent = action.last
                elif isinstance(action, Refill):
                    async for chunk in self._range(action.upto):
                        yield chunk
                else:
                    yield sse_frame(action.text, action.seq)
                    self.sent = action.seq

    async def _range(self, upto: int) -> AsyncIterator[bytes]:
        """Every event after what was sent, up to ``upto``."""
        while self.sent < upto:
            page = await _page(self.session_id, self.sent, upto, False)
            if not page:
                return
            for text, seq in page:
                yield sse_frame(text, seq)
                self.sent = seq

    async def _live(self, layer, channel: str, epoch: str) -> AsyncIterator[bytes]:
        beat = settings.AGENT_SSE_HEARTBEAT_SECONDS
        while True:
            if self._too_slow():
                return  # it comes back with Last-Event-ID once it reads again
            try:
                message = await asyncio.wait_for(layer.receive(channel), beat)
            except TimeoutError:
                # A comment line alone (no blank line after it): nothing for
                # a client to dispatch, however naive its parser.
                yield b": keep-alive\n"
                state, granted = await _tail(self.session_id, self.granted)
                if state is None:
                    yield self.reset(p.R_NOT_FOUND, "this session no longer exists")
                    return
                if not granted:
                    return  # the next request is refused
                head, now = state
                if now != epoch:
                    yield self._rotated()
                    return
                # A publication lost on its way: the log has it.
                async for chunk in self._range(head):
                    yield chunk
                continue
            kind = message.get("type")
            if kind == fanout.REVOKED_MESSAGE:
                return
            if kind == fanout.ROTATED_MESSAGE:
                yield self._rotated()
                return
            if message.get("session_id") != self.session_id:
                continue
            if kind == fanout.EVENTS_MESSAGE:
                events = message["events"]
            elif kind == fanout.EVENT_MESSAGE:
                events = [(message["seq"], message["text"])]
            else:
                continue  # presence, titles: not part of the log
            for seq, text in events:
                if seq <= self.sent:
                    continue  # sent by the replay, or a repeat
                if seq > self.sent + 1:
                    async for chunk in self._range(seq - 1):
                        yield chunk
                yield sse_frame(text, seq)
                self.sent = seq

    def _rotated(self) -> bytes:
        return self.reset(
            p.R_EPOCH_MISMATCH,
            "the session's log was rebuilt: start again from 0 with the new epoch",
        )

    def _too_slow(self) -> bool:
        """Has the client left more than ``AGENT_SEND_BUFFER_BYTES`` unread for
        ``AGENT_SLOW_CONSUMER_SECONDS``? (As a socket that stops reading.)"""
        if self.probe is None:
            return False
        if self.probe() <= settings.AGENT_SEND_BUFFER_BYTES:
            self.slow_since = None
            return False
        now = time.monotonic()
        if self.slow_since is None:
            self.slow_since = now
        return now - self.slow_since >= settings.AGENT_SLOW_CONSUMER_SECONDS


def _sends(page: list[tuple[str, int]]):
    for text, seq in page:
        yield Send(text, seq)


# --- the OpenAPI schema -----------------------------------------------------------


def add_to_schema(result, generator, request, public):
    """drf-spectacular postprocessing hook (``SPECTACULAR_SETTINGS``): the
    stream is a plain async view, not a DRF one, so its path is added here,
    under the prefix the API's other paths have."""
    events = next((k for k in result.get("paths", {}) if k.endswith("/{session_id}/events/")), None)
    if events is None:
        return result
    path = events.removesuffix("events/") + "stream/"
    result["paths"][path] = {
        "get": {
            "operationId": "sessions_stream",
            "summary": "The session's log as Server-Sent Events (read-only)",
            "description": (
                "text/event-stream: each event is `id: <seq>`, `event: <kind>`, `data: "
                "<the event frame>`. It opens with `event: stream` (`session_id`, `epoch`, "
                "`head`), resumes after `Last-Event-ID` (or `?after=N`), sends a comment "
                "while idle and ends with `event: reset` (a resume_rejected frame) when the "
                "cursor cannot be honoured. See docs/sse.md."
            ),
            "tags": ["sessions"],
            "parameters": [
                {
                    "name": "session_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                {"name": "epoch", "in": "query", "schema": {"type": "string"}},
                {"name": "compact", "in": "query", "schema": {"type": "boolean"}},
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer"}},
            ],
            "responses": {
                "200": {
                    "description": "the stream",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                "400": {"description": "a cursor that is not an integer from 0"},
                "403": {"description": "not signed in"},
                "404": {"description": "no such session of this user"},
                "429": {"description": "too many streams of this user open on this server"},
            },
            "security": [{"cookieAuth": []}, {"tokenAuth": []}],
        }
    }
    return result
