"""The SSE dialect's framing (``text/event-stream``): the session's log as
Server-Sent Events, one encoder, no I/O (docs/sse.md).

Each logged event is ``id: <seq>``, ``event: <kind>``, ``data: <the event
frame>`` (one line of JSON: nothing to split); a compacted stretch is
``event: compacted`` with ``id`` its last seq; every response opens with
``event: stream`` and may end with ``event: reset`` (a ``resume_rejected``
frame). A transport writes these bytes; what goes out and when is the
delivery stage's.
"""

from __future__ import annotations

import json
import re
from typing import Protocol

from sessions_app.wire import frames
from sessions_app.wire import protocol as p

# A comment line alone (no blank line after it): nothing for a client to
# dispatch, however naive its parser.
KEEP_ALIVE = b": keep-alive\n"
# How long a client waits before it reconnects, in ms: soon after a cut, and
# not soon at all after a reset it may ignore.
RETRY_MS = 1000
RESET_RETRY_MS = 60_000

# An event frame's kind, without parsing the frame: the server writes
# ``type``, ``session_id`` (an id) and ``seq`` before it (``frames``).
_KIND = re.compile(r'"kind":"([a-z_.]+)"')


def event(name: str, data: str, event_id: int | None = None, retry: int | None = None) -> bytes:
    """One SSE event (``data`` is one line of JSON)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    if retry is not None:
        head = f"retry: {retry}\n{head}"
    return f"{head}event: {name}\ndata: {data}\n\n".encode()


def logged(text: str, seq: int) -> bytes:
    """A logged event's frame text as its SSE event."""
    found = _KIND.search(text, 0, 400)
    kind = found.group(1) if found else json.loads(text)["kind"]
    return event(kind, text, seq)


def compacted(text: str, last: int) -> bytes:
    """A ``compacted`` frame's text, ``id`` the last seq it stands for."""
    return event(p.COMPACTED, text, last)


def opening(session_id: str, epoch: str, head: int) -> bytes:
    """The event every response opens with."""
    data = frames.dumps(frames.stream_opening(session_id, epoch, head))
    return event("stream", data, None, RETRY_MS)


def reset(session_id: str, reason: str, message: str, **extra) -> bytes:
    """The terminal event: a ``resume_rejected`` frame, and a long retry."""
    frame = frames.resume_rejected(session_id, reason, message, **extra)
    return event("reset", frames.dumps(frame), retry=RESET_RETRY_MS)


class Encoder(Protocol):
    """A dialect: the bytes a streamed response writes for what it delivers.

    Pure, one per response (it may keep state: what it has opened, where a
    run is). ``delivery.reader.StreamReader`` calls ``opening`` once, then
    ``logged`` for each event in seq order (``compacted`` for a skipped
    stretch), ``caught_up`` whenever it has delivered everything it knows
    of (the replay reached the head, a live message was delivered),
    ``keep_alive`` while idle, and ``reset`` at a terminal rejection. Once
    ``done`` is true the response ends after what was returned.

    An encoder may need the conversation as the log has it (AG-UI taking
    back text a redo no longer says): it sets ``wants_history`` after a
    ``logged``, and the reader answers with ``given_history(messages)``
    (the view's fetch of it up to that seq, or None when it has none),
    whose bytes follow.
    """

    keep_alive: bytes
    done: bool
    wants_history: bool

    def opening(self, session_id: str, epoch: str, head: int) -> bytes: ...

    def logged(self, text: str, seq: int) -> bytes: ...

    def compacted(self, text: str, last: int) -> bytes: ...

    def caught_up(self) -> bytes: ...

    def reset(self, session_id: str, reason: str, message: str, **extra) -> bytes: ...

    def given_history(self, messages: list | None) -> bytes: ...


class NativeEncoder:
    """The native dialect: every logged event as itself (docs/sse.md)."""

    keep_alive = KEEP_ALIVE
    done = False
    wants_history = False  # it never takes anything back

    @staticmethod
    def opening(session_id: str, epoch: str, head: int) -> bytes:
        return opening(session_id, epoch, head)

    @staticmethod
    def logged(text: str, seq: int) -> bytes:
        return logged(text, seq)

    @staticmethod
    def compacted(text: str, last: int) -> bytes:
        return compacted(text, last)

    @staticmethod
    def caught_up() -> bytes:
        return b""

    @staticmethod
    def reset(session_id: str, reason: str, message: str, **extra) -> bytes:
        return reset(session_id, reason, message, **extra)

    @staticmethod
    def given_history(messages: list | None) -> bytes:
        return b""  # never asked for (``wants_history`` is never set)
