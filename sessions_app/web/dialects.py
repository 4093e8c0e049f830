"""What every dialect's HTTP endpoints share: who is asking and whether they
may (the one HTTP policy, ``web.policy``), a stream's per-user slot, and
the streamed response.

A dialect (the AI SDK's UI message stream, AG-UI) is an encoder in
``wire/`` and a few views; the views call these, so that each speaks with
the REST API's policy, through the same DRF classes (the session cookie
with the CSRF header, or ``Authorization: Token …``; the rates,
``AGENT_API_RATE`` and ``AGENT_API_SEND_RATE`` for what starts work), its
ownership (another user's session is like one that does not exist), and
the native stream's
limits and delivery (``web.stream``: ``AGENT_USER_MAX_SOCKETS`` streams per
user and server, flow control, the groups that end a stream on logout or
revocation).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from django.views.decorators.csrf import csrf_exempt

from sessions_app.delivery.reader import Follow, StreamReader
from sessions_app.delivery.standing import owned_row
from sessions_app.web.policy import Caller, Refused
from sessions_app.web.stream import Slot, StreamResponse, slots
from sessions_app.wire import bodies
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import SessionError


def _read_body(request: HttpRequest) -> bytes:
    """The request's body (``Refused`` 413 past Django's upload limit)."""
    try:
        return request.body
    except RequestDataTooBig:
        raise Refused(
            413,
            p.E_TOO_LARGE,
            "the body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE: send only the new message",
        ) from None


def json_body(request: HttpRequest) -> Any:
    """The request's JSON body, read after ``web.policy.admit``: 413 past Django's
    upload limit, 400 if not JSON or nested too deep (``wire.bodies``)."""
    return bodies.loads(_read_body(request))


class Answer:
    """One request's way out (``dialect_view``): the stream slot it took, given
    back on every way out but the response it is handed to."""

    def __init__(self) -> None:
        self.slot: Slot | None = None

    def take_slot(self, who: Caller) -> None:
        self.slot = take_slot(who)

    async def stream(
        self, request: HttpRequest, who: Caller, to: Reading, encoder
    ) -> StreamResponse:
        response = await open_stream(request, who, to, encoder, self.slot)
        self.slot = None  # the response gives it back
        return response


def dialect_view(*methods: str):
    """A dialect's view, ``view(request, answer, …)``: other methods are 405,
    a refusal (``Refused``, a frame the protocol refuses, a domain error) is
    its JSON response, and a slot not handed to a response is given back."""

    def wrap(view):
        @functools.wraps(view)
        async def wrapped(request: HttpRequest, *args, **kwargs):
            answer = Answer()
            try:
                if request.method not in methods:
                    allowed = " or ".join(methods)
                    raise Refused(405, "method_not_allowed", f"this takes {allowed}")
                return await view(request, answer, *args, **kwargs)
            except (p.FrameError, SessionError) as error:
                return Refused.from_error(error).response()
            except Refused as refused:
                return refused.response()
            finally:
                if answer.slot is not None:
                    answer.slot.release()

        return csrf_exempt(wrapped)

    return wrap


def take_slot(who: Caller) -> Slot:
    """One of the user's stream slots, taken before the request does anything
    (a 429 then refuses the request, not the stream of work already done)."""
    slot = slots.take(who.user.pk, arm=False)
    if slot is None:
        raise Refused(
            429, "too_many_streams", "too many streams of yours are open here", Retry_After="5"
        )
    return slot


@dataclass(frozen=True)
class Reading:
    """What a dialect's response delivers: the session's log after
    ``after``. ``epoch``: the session's, read by the view with its lookup of
    the caller's session (None: read here); the reader reads the head again
    once its groups are joined, and a log rebuilt since ends it with a
    reset. ``history``: the conversation up to a seq, for an encoder that
    asks."""

    session_id: str
    after: int
    epoch: str | None = None
    history: Callable[[int], Awaitable[Any]] | None = None


async def open_stream(
    request: HttpRequest, who: Caller, to: Reading, encoder, slot: Slot
) -> StreamResponse:
    """The response that delivers ``to`` through ``encoder``, on the delivery
    stage like the native stream, in ``slot``."""
    epoch = to.epoch
    if epoch is None:
        row = await owned_row(to.session_id, who.user.pk)
        if row is None:
            raise Refused(404, "not_found", "no such session")
        epoch = row["epoch"]
    follow = Follow(to.session_id, to.after, epoch, who.granted, who.token_id, history=to.history)
    reader = StreamReader(request, follow, slot, encoder)
    slot.arm()  # from here, as a native stream's: the response is about to go out
    return StreamResponse(reader.body(), slot)
