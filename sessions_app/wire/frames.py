"""Every frame the server builds, and their wire text: one place, no I/O.

A frame is a dict until it leaves (``dumps``); the replay path never builds
the dict at all: ``event_texts`` writes an ``event`` frame's text from a row's
columns (the ``data`` column is already JSON text, in the database's own
spacing and escaping), and ``batch_text`` joins texts without parsing them
again. The texts are not byte for byte ``dumps``'s, but parse to the same
frame (``tests/log/test_events.py`` holds them equal, parsed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sessions_app.wire import protocol as p


def dumps(frame: dict[str, Any]) -> str:
    """A frame's wire text: compact, UTF-8 as is."""
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False)


def iso(dt: datetime) -> str:
    """A timestamp as the protocol writes it: UTC, milliseconds, ``Z``."""
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Reading an event frame's text without parsing it (the dialects' hot path):
# the server writes ``type``, ``session_id``, ``seq``, ``kind``, ``run_id``
# and ``ts`` before ``data``, which is last (``event_texts``, ``dumps``).
_KIND = re.compile(r'"kind":"([a-z_.]+)"')
_TEXT_ONLY = re.compile(r'\{\s*"text"\s*:\s*("(?:[^"\\]|\\.)*")\s*\}')
HEADER_CHARS = 400


def run_marker(run_id: str) -> str:
    """What an event frame of ``run_id`` holds before its data."""
    return '"run_id":' + json.dumps(run_id)


_DELTA_KIND = f'"kind":"{p.K_ASSISTANT_DELTA}"'


def kind_of(text: str) -> str | None:
    found = _KIND.search(text, 0, HEADER_CHARS)
    return found.group(1) if found else None


def delta_marker(run_id: str) -> str:
    """What an ``assistant.delta`` frame of ``run_id`` holds before its data
    (the fields in ``event_frame``'s order): one search answers the hot
    path's two questions, its kind and its run."""
    return f"{_DELTA_KIND},{run_marker(run_id)}"


def text_literal(text: str, start: int = 0) -> str | None:
    """The JSON string literal of an event frame's ``data.text``, as written,
    when its data is that alone (a delta's); None otherwise. ``start``: where
    the frame's header is known to reach (its data is searched from there)."""
    at = text.find(',"data":{"text":', start, start + HEADER_CHARS)
    if at < 0 or not text.endswith('"}}'):
        found = _TEXT_ONLY.fullmatch(text, at + 8, len(text) - 1) if at >= 0 else None
        return found.group(1) if found else _spaced_literal(text)
    # As written: compact (a live frame), or ``{"text": "…"}`` (a database's JSON text).
    literal = text[at + 16 : -2]
    if literal[:1] != '"':
        literal = literal.strip()
    # One JSON string, nothing after it: no quote inside but escaped ones.
    inner = literal[1:-1]
    if literal[:1] == '"' and (
        '"' not in inner or '"' not in inner.replace("\\\\", "").replace('\\"', "")
    ):
        return literal
    return None


def _spaced_literal(text: str) -> str | None:
    """``text_literal`` for data written with spaces (``{"text": "…"}``, as a
    database's JSON text has it)."""
    at = text.find(',"data":', 0, HEADER_CHARS)
    if at < 0:
        return None
    found = _TEXT_ONLY.fullmatch(text, at + 8, len(text) - 1)
    return found.group(1) if found else None


def event_frame(event: Any) -> dict[str, Any]:
    """The protocol's ``event`` frame for a stored event (any object with the
    ``Event`` model's fields)."""
    return {
        "type": p.EVENT,
        "session_id": event.session_id,
        "seq": event.seq,
        "kind": event.kind,
        "run_id": event.run_id,
        "ts": iso(event.created_at),
        "data": event.data,
    }


def event_texts(
    session_id: str,
    rows: Iterable[Sequence[Any]],
    *,
    naive_utc: bool = False,
) -> list[tuple[str, int]]:
    """``event`` frames' texts (with their seqs) from rows of ``(seq, kind,
    run_id, ts, data)``, ``data`` already JSON text and ``ts`` already the
    protocol's text, or (``naive_utc``) a naive datetime in UTC."""
    head = '{"type":"event","session_id":' + json.dumps(session_id) + ',"seq":'
    quoted: dict[str | None, str] = {None: "null"}
    out = []
    for seq, kind, run_id, ts, data in rows:
        if naive_utc:
            ts = iso(ts.replace(tzinfo=UTC))
        for name in (kind, run_id):
            if name not in quoted:
                quoted[name] = json.dumps(name)
        out.append(
            (
                f'{head}{seq},"kind":{quoted[kind]},"run_id":{quoted[run_id]},'
                f'"ts":"{ts}","data":{data}}}',
                seq,
            )
        )
    return out


def compacted_frame(session_id: str, first: int, last: int, run_id: str) -> dict[str, Any]:
    """The ``compacted`` frame standing for the superseded events ``first..last``."""
    return {
        "type": p.COMPACTED,
        "session_id": session_id,
        "from": first,
        "to": last,
        "run_id": run_id,
    }


def batch_text(texts: Iterable[str]) -> str:
    """A ``batch`` frame around frames already serialised: joined, not parsed."""
    return '{"type":"' + p.BATCH + '","frames":[' + ",".join(texts) + "]}"


# A frame that answers no request has no ``request_id`` key at all (the SSE
# stream's ``reset``); one that answers a request without an id has ``null``.
NO_REQUEST = object()


def resume_rejected(
    session_id: str | None,
    reason: str,
    message: str,
    request_id: Any = NO_REQUEST,
    **extra: Any,
) -> dict[str, Any]:
    """A handshake that cannot be honoured, and why (``extra``: ``earliest``,
    ``epoch`` where the reason has them)."""
    frame: dict[str, Any] = {"type": p.RESUME_REJECTED}
    if request_id is not NO_REQUEST:
        frame["request_id"] = request_id
    frame.update(session_id=session_id, reason=reason, message=message, **extra)
    return frame


def stream_opening(session_id: str, epoch: str, head: int) -> dict[str, Any]:
    """What the SSE stream's ``stream`` event carries: the log it follows."""
    return {"session_id": session_id, "epoch": epoch, "head": head}


# --- replies to the socket's commands -----------------------------------------------


def pong(request_id: Any) -> dict[str, Any]:
    return {"type": p.PONG, "request_id": request_id}


def send_result(result: Any) -> dict[str, Any]:
    """What a send did (a ``runtime.turns.SendResult``): the socket's
    ``send_ok`` without its type and request id, and the REST answer whole."""
    return {
        "client_message_id": result.client_message_id,
        "seq": result.seq,
        "run_id": result.run_id,
        "status": result.status,
    }


def send_ok(request_id: Any, result: Any) -> dict[str, Any]:
    return {"type": p.SEND_OK, "request_id": request_id, **send_result(result)}


def decide_ok(request_id: Any, approval_id: str, decision: str) -> dict[str, Any]:
    return {
        "type": p.DECIDE_OK,
        "request_id": request_id,
        "approval_id": approval_id,
        "decision": decision,
    }


def cancel_ok(request_id: Any, run_id: str) -> dict[str, Any]:
    return {"type": p.CANCEL_OK, "request_id": request_id, "run_id": run_id}


def switch_ok(request_id: Any, run_id: str, leaf_run_id: str) -> dict[str, Any]:
    return {
        "type": p.SWITCH_OK,
        "request_id": request_id,
        "run_id": run_id,
        "leaf_run_id": leaf_run_id,
    }


def sync_ok(request_id: Any, after: int, head: int) -> dict[str, Any]:
    return {"type": p.SYNC_OK, "request_id": request_id, "after": after, "head": head}


# --- the handshake's answers, and what a following socket is told -------------------


def handshake_ok(
    kind: str,
    request_id: Any,
    connection_id: str,
    session: Mapping[str, Any],
    features: list[str],
    after: int | None = None,
) -> dict[str, Any]:
    """``start_ok`` (``kind`` START_OK) or ``resume_ok`` (with ``after``) for
    ``session`` (its ``id``, ``epoch``, ``head`` and ``title``); the features
    a socket uses, absent when none (a version 1 client sees exactly
    version 1)."""
    frame: dict[str, Any] = {
        "type": kind,
        "request_id": request_id,
        "session_id": session["id"],
        "connection_id": connection_id,
        "epoch": session["epoch"],
    }
    if after is not None:
        frame["after"] = after
    frame.update(head=session["head"], title=session["title"])
    if features:
        frame["features"] = features
    return frame


def presence(
    session_id: str, viewers: int, running: bool, head: int | None = None
) -> dict[str, Any]:
    return {
        "type": p.PRESENCE,
        "session_id": session_id,
        "viewers": viewers,
        "running": running,
        "head": head,
    }


def title(session_id: str, text: str) -> dict[str, Any]:
    return {"type": p.TITLE, "session_id": session_id, "title": text}


# --- the list socket -------------------------------------------------------------


def session_list(sessions: list[dict[str, Any]], truncated: bool) -> dict[str, Any]:
    """The list socket's snapshot (``truncated``: the user has more)."""
    frame: dict[str, Any] = {"type": p.LIST_SESSIONS, "sessions": sessions}
    if truncated:
        frame["truncated"] = True
    return frame


def session_changed(summary: dict[str, Any]) -> dict[str, Any]:
    return {"type": p.LIST_SESSION, "session": summary}


def session_gone(session_id: str) -> dict[str, Any]:
    return {"type": p.LIST_SESSION_GONE, "session_id": session_id}
