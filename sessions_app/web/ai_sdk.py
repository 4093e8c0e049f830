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

import uuid

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from sessions_app.models import AgentSession
from sessions_app.web import conversation
from sessions_app.web.dialects import Caller, Refused, caller, json_body, open_stream
from sessions_app.wire import ai_sdk, frames
from sessions_app.wire import ai_sdk_requests as requests
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import SessionError


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


def _act(who: Caller, asked: requests.ChatRequest) -> tuple[str, str, int]:
    """Do what the request asks; the session, the run to stream and the seq
    after which its response starts."""
    session = conversation.owned_session(who.user, asked.chat_id)
    by = who.user.get_username()
    if asked.user is None and asked.trigger != requests.REGENERATE:
        return (session.id, *conversation.answer_gates(session, asked.answers, by))
    if asked.trigger == requests.REGENERATE:
        frame = {
            "client_message_id": f"regenerate-{uuid.uuid4().hex}",
            "regenerate": asked.message_id or session.leaf_run_id,
        }
    else:
        frame = {"client_message_id": asked.user[0], "text": asked.user[1]}
    send = p.parse_send({"type": p.SEND, "request_id": "ai-sdk", **frame})
    return (session.id, *conversation.send(session, send, by, "ai-sdk"))


@csrf_exempt
async def resume(request: HttpRequest, chat_id: str) -> HttpResponse:
    """``GET /api/ai-sdk/chat/<id>/stream`` (see the module's comment)."""
    try:
        if request.method not in ("GET", "HEAD"):
            raise Refused(405, "method_not_allowed", "GET the stream")
        who = await caller(request)
        active = await sync_to_async(conversation.active_run)(who.user.pk, chat_id)
        if active is None:
            return HttpResponse(status=204)
        run_id, after = active
        encoder = ai_sdk.UiMessageStream(chat_id, run_id)
        return _stream(await open_stream(request, who, chat_id, after, encoder))
    except Refused as refused:
        return refused.response()


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
    out = []
    for turn in conversation.path_turns(session):
        out.append(requests.user_message(turn.message_id, turn.text))
        if turn.finished:
            logged = [(frames.dumps(frames.event_frame(e)), e.seq) for e in turn.events]
            out.append(requests.assistant_message(session.id, turn.run_id, logged))
    return out
