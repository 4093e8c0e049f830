"""The AI SDK's endpoints: ``useChat`` with ``DefaultChatTransport`` and only
``api`` set talks to this server (docs/integrations.md).

- ``POST /api/ai-sdk/chat``: the transport's send. The chat ``id`` is a
  session of the caller's (made with that id on its first message). The
  last message is all that is read: a user message is sent as the socket's
  ``send`` (its ``id`` the ``client_message_id``: a retry appends nothing),
  an assistant message carrying approval responses decides those gates
  (exactly once, from any tab: a gate decided elsewhere keeps that
  decision, and the stream says which), ``trigger: "regenerate-message"``
  regenerates ``messageId`` (a run id; the last answer without one). The
  answer is the run's message as a UI message stream
  (``wire.ai_sdk.UiMessageStream``), up to its finish or its next gate.
- ``GET /api/ai-sdk/chat/<id>/stream``: the transport's reconnect. The
  oldest run of the chat not finished, replayed from the log from its start
  (the transport's ``resumeStreamIsReplay``), then live: it survives a
  server's kill -9 and a worker's takeover. 204 when nothing runs.
- ``GET /api/ai-sdk/chat/<id>/messages``: the chat's finished turns on its
  active path as ``UIMessage``s, for a page's ``messages``; the run still
  going is left to the reconnect, so nothing shows twice.
"""

from __future__ import annotations

import contextlib
import uuid

from asgiref.sync import sync_to_async
from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, ApprovalRequest, Event, Run
from sessions_app.runtime import runs, turns
from sessions_app.server import tracing
from sessions_app.web.dialects import Caller, Refused, caller, json_body, open_stream
from sessions_app.wire import ai_sdk, frames
from sessions_app.wire import ai_sdk_requests as requests
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import AlreadyDecided, ApprovalCancelled, SessionError


def _stream(response):
    for name, value in ai_sdk.HEADERS.items():
        response[name] = value
    return response


@csrf_exempt
async def chat(request: HttpRequest) -> HttpResponse:
    """``POST /api/ai-sdk/chat`` (see the module's comment)."""
    try:
        if request.method != "POST":
            raise Refused(405, "method_not_allowed", "POST the chat's messages")
        who = await caller(request, spends=True)
        asked = requests.parse_chat(json_body(request))
        session_id, run_id, after = await sync_to_async(_act)(who, asked)
        encoder = ai_sdk.UiMessageStream(session_id, run_id)
        return _stream(await open_stream(request, who, session_id, after, encoder))
    except (p.FrameError, SessionError) as error:
        return Refused.from_error(error).response()
    except Refused as refused:
        return refused.response()


def _session(who: Caller, chat_id: str) -> AgentSession:
    """The caller's session with this id, made on a first message."""
    found = AgentSession.objects.filter(id=chat_id).first()
    if found is None:
        try:
            return create_session(who.user, "", session_id=chat_id)
        except IntegrityError:  # made meanwhile, by this caller's retry or another's
            found = AgentSession.objects.filter(id=chat_id).first()
    if found is None or found.owner_id != who.user.pk:
        raise Refused(404, "not_found", "no such chat")
    return found


def _act(who: Caller, asked: requests.ChatRequest) -> tuple[str, str, int]:
    """Do what the request asks; the session, the run to stream and the seq
    after which its response starts."""
    session = _session(who, asked.chat_id)
    by = who.user.get_username()
    if asked.trigger == requests.REGENERATE:
        target = asked.message_id or session.leaf_run_id
        send = p.parse_send(
            {
                "type": p.SEND,
                "request_id": "ai-sdk",
                "client_message_id": f"regenerate-{uuid.uuid4().hex}",
                "regenerate": target,
            }
        )
    elif asked.user is not None:
        message_id, text = asked.user
        send = p.parse_send(
            {
                "type": p.SEND,
                "request_id": "ai-sdk",
                "client_message_id": message_id,
                "text": text,
            }
        )
    else:
        return (session.id, *_answer(session, asked.answers, by))
    with tracing.span("session.send", **{"session.id": session.id, "via": "ai-sdk"}):
        result = turns.send(session.id, send, by, tracing.carrier())
    return session.id, result.run_id, result.seq


def _answer(session: AgentSession, answers, by: str) -> tuple[str, int]:
    """Decide each gate answered (a gate decided already keeps its decision)
    and continue the run's message after the gate."""
    run_id, after = "", 0
    for approval_id, approved in answers:
        gate = (
            ApprovalRequest.objects.filter(id=approval_id, session_id=session.id)
            .values_list("run_id", flat=True)
            .first()
        )
        if gate is None:
            raise Refused(404, "not_found", "no such approval in this chat")
        # A gate decided elsewhere keeps that decision: the stream says which.
        with contextlib.suppress(AlreadyDecided, ApprovalCancelled):
            runs.decide(approval_id, p.APPROVE if approved else p.DENY, by, session_id=session.id)
        paused = (
            Event.objects.filter(
                session_id=session.id,
                run_id=gate,
                kind=p.K_RUN_PAUSED,
                data__approval_id=approval_id,
            )
            .values_list("seq", flat=True)
            .first()
        )
        run_id, after = gate, paused or 0
    return run_id, after


@csrf_exempt
async def resume(request: HttpRequest, chat_id: str) -> HttpResponse:
    """``GET /api/ai-sdk/chat/<id>/stream`` (see the module's comment)."""
    try:
        if request.method not in ("GET", "HEAD"):
            raise Refused(405, "method_not_allowed", "GET the stream")
        who = await caller(request)
        active = await sync_to_async(_active_run)(who, chat_id)
        if active is None:
            return HttpResponse(status=204)
        run_id, after = active
        encoder = ai_sdk.UiMessageStream(chat_id, run_id)
        return _stream(await open_stream(request, who, chat_id, after, encoder))
    except Refused as refused:
        return refused.response()


def _active_run(who: Caller, chat_id: str) -> tuple[str, int] | None:
    """The oldest run of the caller's chat that is not finished, and the seq
    before its message; None when there is none (or no such chat)."""
    if not p.is_session_id(chat_id):
        return None
    found = (
        Run.objects.filter(session_id=chat_id, session__owner_id=who.user.pk, status__in=Run.ACTIVE)
        .order_by("created_at", "message_seq")
        .values_list("id", "message_seq")
        .first()
    )
    return None if found is None else (found[0], found[1] - 1)


@csrf_exempt
async def messages(request: HttpRequest, chat_id: str) -> HttpResponse:
    """``GET /api/ai-sdk/chat/<id>/messages`` (see the module's comment)."""
    try:
        if request.method not in ("GET", "HEAD"):
            raise Refused(405, "method_not_allowed", "GET the messages")
        who = await caller(request)
        return JsonResponse(await sync_to_async(_messages)(who, chat_id), safe=False)
    except Refused as refused:
        return refused.response()


def _messages(who: Caller, chat_id: str) -> list[dict]:
    if not p.is_session_id(chat_id):
        return []
    session = AgentSession.objects.filter(id=chat_id, owner_id=who.user.pk).first()
    if session is None:
        return []
    path = turns.ancestry(session.leaf_run_id or None)
    rows = Run.objects.filter(id__in=path).values(
        "id", "client_message_id", "text", "answers_id", "status"
    )
    by_id = {row["id"]: row for row in rows}
    asked = {row["id"]: row["client_message_id"] for row in rows}
    asked.update(
        Run.objects.filter(id__in={row["answers_id"] for row in rows} - {None}).values_list(
            "id", "client_message_id"
        )
    )
    finished = [run_id for run_id in path if by_id[run_id]["status"] == Run.Status.FINISHED]
    logged: dict[str, list[tuple[str, int]]] = {run_id: [] for run_id in finished}
    for text, seq, run_id in _run_frames(session.id, finished) if finished else ():
        logged[run_id].append((text, seq))
    out = []
    for run_id in path:
        row = by_id[run_id]
        out.append(requests.user_message(asked[row["answers_id"] or run_id], row["text"]))
        if run_id in logged:
            out.append(requests.assistant_message(session.id, run_id, logged[run_id]))
    return out


def _run_frames(session_id: str, run_ids: list[str]):
    """The frames of these runs' events but their deltas (the messages say it
    all), in seq order, with their run."""
    events = (
        Event.objects.filter(session_id=session_id, run_id__in=run_ids)
        .exclude(kind=p.K_ASSISTANT_DELTA)
        .order_by("seq")
    )
    return [(frames.dumps(frames.event_frame(e)), e.seq, e.run_id) for e in events]
