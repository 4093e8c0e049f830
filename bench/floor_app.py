"""The floor: the least a daphne process can do to answer the resume kit.

A bare ASGI application, no Django, no database, no channel layer, no auth:
sessions live in a dict, each event's frame is encoded once when it is made,
and a resume sends ``resume_ok`` and then the stored text of every event after
the cursor, one WebSocket message each, exactly as the product's v1 replay
does. It speaks just enough of protocol v1 for ``bench/resume.py --floor``
(``start``, ``send`` of ``/stream N 0``, ``resume``), and for
``bench/storm.py --floor`` and ``bench/idle.py --floor``: a resume of a
session it does not know makes one whose last three events follow the cursor.

What it measures: the cost of daphne and autobahn themselves, the upgrade and
one frame per event, for the same bytes the product sends. Whatever ratio to
Socket.IO the floor gets, no server on daphne sending plain v1 frames can beat
it; ``bench/floor.py`` runs it. Not part of the product.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime

_SESSIONS: dict[str, list[str]] = {}
EPOCH = "floor"


def _ts() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _append(sid: str, kind: str, data: dict, run_id: str | None) -> str:
    log = _SESSIONS[sid]
    frame = {
        "type": "event",
        "session_id": sid,
        "seq": len(log) + 1,
        "kind": kind,
        "run_id": run_id,
        "ts": _ts(),
        "data": data,
    }
    text = json.dumps(frame, separators=(",", ":"))
    log.append(text)
    return text


def _storm_session(sid, after) -> list | None:
    """A session ``bench/storm.py --floor`` resumes: three events after ``after``
    (the events before it are never read, so they are not made)."""
    if not isinstance(sid, str) or not sid.startswith("storm-") or not isinstance(after, int):
        return None
    _SESSIONS[sid] = [""] * after
    for i in range(3):
        _append(sid, "assistant.delta", {"text": f"t{after + i + 1} "}, None)
    return _SESSIONS[sid]


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "websocket":
        await receive()
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"websocket only"})
        return

    async def reply(frame: dict) -> None:
        await send({"type": "websocket.send", "text": json.dumps(frame, separators=(",", ":"))})

    current = None  # the session this socket started or resumed
    while True:
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
            continue
        if message["type"] == "websocket.disconnect":
            return
        frame = json.loads(message.get("text") or message.get("bytes") or "{}")
        kind, rid = frame.get("type"), frame.get("request_id")
        if kind == "start":
            sid = current = "s_" + secrets.token_urlsafe(16)
            _SESSIONS[sid] = []
            await reply(
                {
                    "type": "start_ok",
                    "request_id": rid,
                    "session_id": sid,
                    "epoch": EPOCH,
                    "head": 0,
                }
            )
        elif kind == "resume":
            log = _SESSIONS.get(frame.get("session_id"))
            if log is None:
                log = _storm_session(frame.get("session_id"), frame.get("after"))
            if log is None:
                await reply({"type": "resume_rejected", "request_id": rid, "reason": "not_found"})
                continue
            current = frame["session_id"]
            after = int(frame.get("after") or 0)
            await reply(
                {
                    "type": "resume_ok",
                    "request_id": rid,
                    "session_id": frame["session_id"],
                    "epoch": EPOCH,
                    "head": len(log),
                }
            )
            for text in log[after:]:
                await send({"type": "websocket.send", "text": text})
        elif kind == "send":
            sid = current
            args = frame.get("text", "").split()
            count = int(args[1]) if len(args) > 1 else 10
            run_id = "r_" + secrets.token_urlsafe(8)
            cmid = frame.get("client_message_id")
            frames = [
                _append(
                    sid,
                    "user.message",
                    {"client_message_id": cmid, "text": frame.get("text")},
                    run_id,
                ),
                _append(sid, "run.started", {"client_message_id": cmid}, run_id),
            ]
            tokens = [f"tok{i} " for i in range(count)]
            frames += [_append(sid, "assistant.delta", {"text": t}, run_id) for t in tokens]
            frames.append(_append(sid, "assistant.message", {"text": "".join(tokens)}, run_id))
            frames.append(_append(sid, "run.finished", {"stop_reason": "end_turn"}, run_id))
            await reply(
                {
                    "type": "send_ok",
                    "request_id": rid,
                    "client_message_id": cmid,
                    "run_id": run_id,
                    "status": "started",
                }
            )
            for text in frames:
                await send({"type": "websocket.send", "text": text})
        elif kind == "ping":
            await reply({"type": "pong", "request_id": rid})
