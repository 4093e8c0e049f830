"""The AI SDK's endpoints: ``useChat`` with ``DefaultChatTransport`` and only
``api`` set talks to this server (docs/integrations.md).

- ``POST /api/ai-sdk/chat``: the transport's send. The chat ``id`` is the
  client's name for one of the caller's conversations (``conversation``:
  per user; a new one makes a session with an id of its own). The last
  message is all that is read: a user message is sent as the socket's
  ``send`` (its ``id`` the ``client_message_id``: a retry appends nothing;
  refused 409 while a gate waits), an assistant message carrying approval
  responses decides those gates (exactly once, from any tab: a gate decided
  elsewhere keeps that decision, and the stream says which),
  ``trigger: "regenerate-message"`` regenerates ``messageId`` (a run id;
  the last answer without one). The answer is the run's message as a UI
  message stream (``wire.ai_sdk.UiMessageStream``), up to its finish or its
  next gate.
- ``GET /api/ai-sdk/chat/<id>/stream``: the transport's reconnect. The
  oldest run of the chat not finished (with ``?run=``, the page's cursor:
  the run its messages left out, finished since or not), replayed from the log from its
  start (the transport's ``resumeStreamIsReplay``), then live: it survives a
  server's kill -9 and a worker's takeover. 204 when there is none.
- ``GET /api/ai-sdk/chat/<id>/messages``: the chat's turns on its active
  path as ``UIMessage``s, for a page's ``messages``; the run still going is
  left to the reconnect, so nothing shows twice, and ``X-Agent-Resume-Run``
  names that run."""

from __future__ import annotations

import uuid

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse

from sessions_app.runtime.gates import VIA_AI_SDK
from sessions_app.server.db_pool import reading_in_db_pool
from sessions_app.web import conversation
from sessions_app.web.dialects import (
    Answer,
    Caller,
    Reading,
    Refused,
    dialect_view,
    json_body,
)
from sessions_app.web.policy import admit
from sessions_app.wire import ai_sdk, frames
from sessions_app.wire import ai_sdk_requests as requests
from sessions_app.wire import protocol as p


def _stream(response):
    for name, value in ai_sdk.HEADERS.items():
        response[name] = value
    return response


@dialect_view("POST")
async def chat(request: HttpRequest, answer: Answer) -> HttpResponse:
    """``POST /api/ai-sdk/chat`` (see the module's comment)."""
    who = await admit(request, spends=True)
    asked = requests.parse_chat(json_body(request))
    answer.take_slot(who)
    session_id, run_id, after = await sync_to_async(_act)(who, asked)
    encoder = ai_sdk.UiMessageStream(session_id, run_id)
    return _stream(await answer.stream(request, who, Reading(session_id, after), encoder))


def _act(who: Caller, asked: requests.ChatRequest) -> tuple[str, str, int]:
    """Do what the request asks; the session, the run to stream and the seq
    after which its response starts."""
    by = who.user.get_username()
    if asked.user is not None:
        # Validated before anything is made: a refused message makes no chat.
        send = p.send_of({"client_message_id": asked.user[0], "text": asked.user[1]})
        session = conversation.find_or_make(who.user, asked.chat_id)
        return (session.id, *conversation.send(session, send, by, "ai-sdk"))
    # Only a new message makes a conversation: an answer or a regenerate
    # names one that exists.
    session = conversation.find(who.user, asked.chat_id)
    if session is None:
        raise Refused(404, "not_found", "no such chat")
    if asked.trigger != requests.REGENERATE:
        return (session.id, *conversation.answer_gates(session, asked.answers, by, VIA_AI_SDK))
    send = p.send_of(
        {
            "client_message_id": f"regenerate-{uuid.uuid4().hex}",
            "regenerate": asked.message_id or session.leaf_run_id,
        }
    )
    return (session.id, *conversation.send(session, send, by, "ai-sdk"))


@dialect_view("GET", "HEAD")
async def resume(request: HttpRequest, answer: Answer, chat_id: str) -> HttpResponse:
    """``GET /api/ai-sdk/chat/<id>/stream[?run=ID]`` (see the module's comment)."""
    who = await admit(request)
    run_id = request.GET.get("run")
    if run_id is not None and not p.is_session_id(run_id):
        raise Refused(400, p.E_BAD_FRAME, "run must be a run id")
    found = await reading_in_db_pool(_to_resume)(who, chat_id, run_id)
    if found is None:
        return HttpResponse(status=204)
    session_id, epoch, run_id, start = found
    answer.take_slot(who)
    encoder = ai_sdk.UiMessageStream(session_id, run_id)
    return _stream(await answer.stream(request, who, Reading(session_id, start, epoch), encoder))


def _to_resume(who: Caller, chat_id: str, run_id: str | None):
    """The session (and its epoch) and the run a reconnect streams, and a
    seq before it, in one trip to the pool: the run the page's messages
    left out when it names one, else the run still going; None for nothing
    (or no such chat of the caller's)."""
    session = conversation.find(who.user, chat_id)
    if session is None:
        return None
    found = (
        conversation.active_run(session)
        if run_id is None
        else conversation.run_to_resume(session, run_id)
    )
    return None if found is None else (session.id, session.epoch, *found)


@dialect_view("GET", "HEAD")
async def messages(request: HttpRequest, answer: Answer, chat_id: str) -> HttpResponse:
    """``GET /api/ai-sdk/chat/<id>/messages[?before=RUN&limit=N]`` (see the
    module's comment)."""
    who = await admit(request)
    before = request.GET.get("before")
    if before is not None and not p.is_session_id(before):
        raise Refused(400, p.E_BAD_FRAME, "before must be a run id (X-Agent-Older)")
    limit = _limit(request.GET.get("limit"))
    listed, left_out, older = await reading_in_db_pool(_messages)(who, chat_id, before, limit)
    response = JsonResponse(listed, safe=False)
    # What the page's reconnect passes as ?run=: the first run left out,
    # streamed then even if it finished in between.
    if left_out:
        response[RESUME_HEADER] = left_out
    if older:
        response[OLDER_HEADER] = older
    return response


RESUME_HEADER = "X-Agent-Resume-Run"
# The page holds the newest turns; this names the run to pass as ?before=
# for the turns older than these (absent: these start the conversation).
OLDER_HEADER = "X-Agent-Older"


def _limit(value: str | None) -> int:
    if value is None:
        return conversation.PAGE_TURNS
    if (
        not (value.isascii() and value.isdigit())
        or not 1 <= int(value) <= conversation.MAX_PAGE_TURNS
    ):
        raise Refused(400, p.E_BAD_FRAME, f"limit must be 1 to {conversation.MAX_PAGE_TURNS} turns")
    return int(value)


def _messages(
    who: Caller, chat_id: str, before: str | None, limit: int
) -> tuple[list[dict], str, str]:
    """A page of the chat's turns as ``UIMessage``s (``conversation.path_turns``),
    the first run they leave out (not finished: the reconnect's; "" when none
    is), and the run to ask ``before`` for older turns ("" when there are none)."""
    session = conversation.find(who.user, chat_id)
    if session is None:
        return [], "", ""
    try:
        page = conversation.path_turns(session, before=before, max_turns=limit)
    except conversation.NoSuchTurn:
        raise Refused(404, "not_found", "no such run in this chat") from None
    out = []
    left_out = ""
    for turn in page.turns:
        out.append(requests.user_message(turn.message_id, turn.text))
        if turn.finished:
            logged = [(frames.dumps(frames.event_frame(e)), e.seq) for e in turn.events]
            out.append(requests.assistant_message(session.id, turn.run_id, logged))
        elif not left_out and before is None:
            left_out = turn.run_id
    return out, left_out, page.before or ""
