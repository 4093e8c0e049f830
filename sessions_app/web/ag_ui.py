"""AG-UI's endpoints: an AG-UI client (``@ag-ui/client``'s ``HttpAgent``,
CopilotKit) runs this server's agent (docs/integrations.md).

- ``POST /api/ag-ui/``: a ``RunAgentInput``. Its ``threadId`` is one of
  the caller's sessions (made with that id on first use; an empty one makes
  a new session, whose id ``RUN_STARTED`` gives). Only the new input is
  read: the newest user message, sent as the socket's ``send`` (its ``id``
  the ``client_message_id``: sent again, nothing is appended), or
  the ``resume`` entries answering the gates the last run ended at (each
  decided exactly once, from any client: one decided elsewhere keeps that
  decision). The session's log is the history; the client's copy of earlier
  turns is never trusted. The answer is the AG-UI run
  (``wire.ag_ui.AgUiRun``) as Server-Sent Events.
- The same request sent again with ``Last-Event-ID`` (this server's
  extension: AG-UI has no stream position) resumes a response that was
  cut: ``RUN_STARTED``, then exactly what followed that position.
- ``GET /api/ag-ui/<threadId>/stream``: a client that joins late.
  ``RUN_STARTED``, ``MESSAGES_SNAPSHOT`` (the finished turns), then the run
  still going, from the log, to its end or its gate; with
  ``Last-Event-ID``, what followed that position.
"""

from __future__ import annotations

import uuid
from typing import Any

from ag_ui.core import RunAgentInput, UserMessage
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from pydantic import ValidationError

from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession
from sessions_app.runtime.gates import VIA_AG_UI
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
from sessions_app.web.stream import StreamResponse
from sessions_app.wire import ag_ui, ag_ui_messages
from sessions_app.wire import protocol as p


@dialect_view("POST")
async def run(request: HttpRequest, answer: Answer) -> HttpResponse:
    """``POST /api/ag-ui/`` (see the module's comment)."""
    who = await admit(request, spends=True)
    try:
        asked = RunAgentInput.model_validate(json_body(request))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise Refused(400, p.E_BAD_FRAME, f"not a RunAgentInput: {where}: {first['msg']}") from None
    if not (p.is_unicode(asked.run_id) and p.is_unicode(asked.thread_id or "")):
        # Echoed in RUN_STARTED: text that cannot be encoded would end the stream.
        raise Refused(400, p.E_BAD_FRAME, "threadId and runId must be text (no lone surrogates)")
    position = _position(request)
    answer.take_slot(who)
    session_id, thread_id, epoch, run_id, after, went_on = await sync_to_async(_act)(
        who, asked, position
    )
    snapshot, segments, gates = went_on or (None, 0, ())
    pickup = ag_ui.Pickup(position, snapshot, segments, gates)
    encoder = ag_ui.AgUiRun(thread_id, asked.run_id, run_id, epoch, pickup)
    history = _history(session_id, run_id)
    return await answer.stream(request, who, Reading(session_id, after, history=history), encoder)


def _history(session_id: str, run_id: str):
    """The conversation before a seq, on the path to ``run_id``, as AG-UI
    messages (for the encoder that takes back what a redo no longer says)."""

    async def before(seq: int) -> list | None:
        return await reading_in_db_pool(_history_before)(session_id, run_id, seq)

    return before


def _history_before(session_id: str, run_id: str, seq: int) -> list | None:
    session = AgentSession.objects.filter(id=session_id).first()
    if session is None:  # deleted under the stream: it ends with its reset
        return None
    turns = conversation.path_turns(session, upto=seq - 1, leaf=run_id).turns
    return ag_ui_messages.history([_turn(turn) for turn in turns])


def _position(request: HttpRequest) -> tuple[str, int, int] | None:
    value = request.headers.get("Last-Event-ID")
    if value is None:
        return None
    position = ag_ui.parse_position(value)
    if position is None:
        raise Refused(400, p.E_BAD_FRAME, "Last-Event-ID must be an id this server gave: E:SEQ")
    return position


def _same_epoch(position, epoch: str) -> None:
    if position is not None and position[0] != epoch:
        raise Refused(
            409,
            p.R_EPOCH_MISMATCH,
            "the thread's log was rebuilt since that position: join it again",
        )


def _act(who: Caller, asked: RunAgentInput, position) -> tuple:
    """Do what the input asks; the session, the thread id the client knows it
    by, its epoch, the run to stream and the seq after which the AG-UI run
    starts (and, going on after a gate, the snapshot and the text messages
    before). A resume's position is checked before anything is done."""
    by = who.user.get_username()
    if asked.thread_id and not p.is_session_id(asked.thread_id):
        raise Refused(400, p.E_BAD_FRAME, "threadId: 1 to 40 of A-Z a-z 0-9 _ -")
    if position is not None and not asked.thread_id:
        raise Refused(400, p.E_BAD_FRAME, "a resume (Last-Event-ID) names its threadId")
    if asked.resume and not asked.thread_id:
        raise Refused(400, p.E_BAD_FRAME, "an answer (resume) names its threadId")
    # The new input (a cut stream's request sent again carries it too: sent
    # again, nothing is appended), validated before any thread is made.
    send = None if asked.resume else _new_input(asked)
    if not asked.thread_id:
        session = create_session(who.user)
    elif asked.resume or position is not None:
        # Only a new message makes a thread: a resume names one that exists.
        session = conversation.find(who.user, asked.thread_id)
        if session is None:
            raise Refused(404, "not_found", "no such thread")
    else:
        session = conversation.find_or_make(who.user, asked.thread_id)
    thread_id = asked.thread_id or session.id
    _same_epoch(position, session.epoch)
    ids = (session.id, thread_id, session.epoch)
    if asked.resume:
        answers = [(entry.interrupt_id, _answer_of(entry)) for entry in asked.resume]
        run_id, after = conversation.answer_gates(session, answers, by, VIA_AG_UI)
        return *ids, run_id, after, _went_on(session, run_id, after)
    run_id, after = conversation.send(session, send, by, "ag-ui")
    return *ids, run_id, after, None


def _new_input(asked: RunAgentInput) -> p.Send:
    """The newest user input as a send (what follows it is the client's copy
    of its answer), or ``Refused``."""
    last = next((m for m in reversed(asked.messages) if isinstance(m, UserMessage)), None)
    if last is None:
        raise Refused(400, p.E_BAD_FRAME, "nothing to run: no user message and no resume")
    content = last.content
    if not isinstance(content, str):
        content = "\n".join(getattr(part, "text", "") for part in content if part.type == "text")
    return p.send_of({"client_message_id": last.id, "text": content})


def _answer_of(entry) -> dict[str, Any]:
    """A ``resume`` entry as a decision's fields: ``status: "cancelled"``
    denies; ``"resolved"`` with ``payload.approved`` approves (or, with
    ``args``, approves with those arguments: an edit) or denies (with an
    optional ``reason``); a ``response`` answers instead of the call; an
    ``answer`` (an object) fills in a question's form."""
    if entry.status != "resolved":
        return {"decision": p.DENY}
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if not isinstance(payload.get("approved"), bool):
        raise Refused(400, p.E_BAD_FRAME, "a resolved approval's payload is {approved: bool}")
    if "response" in payload:
        return {"decision": p.RESPOND, "response": payload["response"]}
    if payload["approved"] and "answer" in payload:
        return {"decision": p.ANSWER, "answer": payload["answer"]}
    if payload["approved"]:
        if "args" in payload:
            return {"decision": p.EDIT, "args": payload["args"]}
        return {"decision": p.APPROVE}  # an approval's reason, if any, is dropped
    return {"decision": p.DENY, **({"reason": payload["reason"]} if "reason" in payload else {})}


def _went_on(session: AgentSession, run_id: str, after: int):
    """What a response that goes on after a gate opens with: the conversation
    up to the gate (``MESSAGES_SNAPSHOT``), how many text messages of the
    run came before it, and its gates not decided by then (a step answered
    in part: the rest are its interrupts again)."""
    turns = conversation.path_turns(session, upto=after).turns
    snapshot = ag_ui_messages.history([_turn(turn) for turn in turns])
    said = [t for t in turns if t.run_id == run_id]
    events = said[0].events if said else []
    segments = sum(1 for e in events if e.kind == p.K_ASSISTANT_MESSAGE and e.data.get("text"))
    asked = {e.data["approval_id"]: e.data for e in events if e.kind == p.K_APPROVAL_REQUESTED}
    for e in events:
        if e.kind == p.K_APPROVAL_DECIDED:
            asked.pop(e.data.get("approval_id"), None)
    return snapshot, segments, tuple(asked.values())


def _turn(turn: conversation.Turn):
    return turn.message_id, turn.text, turn.run_id, [(e.kind, e.data, e.seq) for e in turn.events]


@dialect_view("GET", "HEAD")
async def join(request: HttpRequest, answer: Answer, thread_id: str) -> HttpResponse:
    """``GET /api/ag-ui/<threadId>/stream`` (see the module's comment)."""
    who = await admit(request)
    position = _position(request)
    found = await reading_in_db_pool(_joined)(who, thread_id)
    if found is None:
        raise Refused(404, "not_found", "no such thread")
    session_id, epoch, active, snapshot = found
    _same_epoch(position, epoch)
    if active is None:
        encoder = ag_ui.AgUiRun(
            thread_id, f"join-{uuid.uuid4().hex}", "", epoch, ag_ui.Pickup(snapshot=snapshot)
        )
        body = encoder.opening(thread_id, epoch, 0) + encoder.finished_now()
        return StreamResponse(_once(body))
    run_id, after = active
    encoder = ag_ui.AgUiRun(thread_id, run_id, run_id, epoch, ag_ui.Pickup(position, snapshot))
    answer.take_slot(who)
    reading = Reading(session_id, after, epoch, _history(session_id, run_id))
    return await answer.stream(request, who, reading, encoder)


async def _once(body: bytes):
    yield body


def _joined(who: Caller, thread_id: str):
    """The thread's session and epoch, its run still going (and the seq
    before it), and its turns as AG-UI messages (of a run not finished, only
    its question: the stream replays the rest), in one trip to the pool;
    None for no such thread."""
    session = conversation.find(who.user, thread_id)
    if session is None:
        return None
    turns = [_turn(turn) for turn in conversation.path_turns(session).turns]
    snapshot = ag_ui_messages.history(turns)
    return session.id, session.epoch, conversation.active_run(session), snapshot
