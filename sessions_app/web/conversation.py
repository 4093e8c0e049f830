"""The conversation as the dialects' requests see it, on the database side:
a client's thread or chat id as one of the caller's sessions (made on first
use, with an id of its own: ``AgentSession.external_id``),
gates answered from a request, the run a reconnect follows, and the
finished turns a page or a late joiner is given.

Shared by ``web.ai_sdk`` and ``web.ag_ui`` (sync code: the views call it
through ``sync_to_async``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError
from django.db.models import Q

from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, ApprovalRequest, Event, Run
from sessions_app.runtime import deciding, turns
from sessions_app.runtime.gates import Decision
from sessions_app.server import tracing
from sessions_app.web.dialects import Refused
from sessions_app.wire import decisions
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import AlreadyDecided, ApprovalCancelled


def find(user, client_id: str) -> AgentSession | None:
    """The user's conversation a client names ``client_id``: the session of
    that id, or the one made for that client id (``external_id``); None."""
    if not p.is_session_id(client_id):
        return None
    # One query; the session of that id wins over one made for a client id
    # that happens to equal it.
    named = AgentSession.objects.filter(Q(id=client_id) | Q(external_id=client_id), owner=user)
    found = list(named[:2])
    return next((s for s in found if s.id == client_id), found[0] if found else None)


def find_or_make(user, client_id: str) -> AgentSession:
    """``find``, or a new session of the user's for that client id. Ids are
    per user: another user's session by that id is never found, probed or
    taken, and a new session has an id of its own."""
    found = find(user, client_id)
    if found is not None:
        return found
    try:
        return create_session(user, "", external_id=client_id)
    except IntegrityError:  # made meanwhile, by a retry of this user's
        made = AgentSession.objects.filter(owner=user, external_id=client_id).first()
        if made is None:
            raise
        return made


def send(session: AgentSession, send: p.Send, by: str, via: str) -> tuple[str, int]:
    """The socket's ``send``, once per ``client_message_id``: the run and the
    seq of its ``user.message`` (a response starts after it). A new input
    while a gate waits is refused (409 ``approval_pending``, decided under
    the session's lock): its run would queue behind the gate, and a client
    streaming its answer cannot answer the gate meanwhile. A send again of
    one already made streams it; a regenerate or an edit stops the gated
    run first, as everywhere."""
    with tracing.span("session.send", **{"session.id": session.id, "via": via}):
        result = turns.send(
            session.id, send, turns.Sender(by, tracing.carrier(), turns.BehindGate.REFUSE)
        )
    return result.run_id, result.seq


# The most gates one request may answer (a step's gates are far fewer).
MAX_ANSWERS = 64


def answer_gates(session: AgentSession, answers, by: str, via: str) -> tuple[str, int]:
    """Decide each gate answered (``answers``: approval id and the answer's
    fields, as ``wire.decisions.fields_of`` reads them: a decision, a
    denial's reason, an edit's arguments, a response), exactly once (a gate
    decided already, from another tab or the admin, keeps that decision:
    the stream says which); the run and the seq after which it goes on (its
    ``run.paused``).

    Bounded and validated before anything is decided: a repeated answer to
    a gate is dropped (the first stands), more than ``MAX_ANSWERS`` gates is
    400 ``too_many_answers``, an answer the socket would refuse is 400
    ``bad_frame``, and every gate named must be the session's (one read;
    else 404, deciding none). Only the gates still waiting are decided, so a
    request costs at most the session's waiting gates."""
    unique: dict[str, Mapping[str, Any]] = {}
    for approval_id, fields in answers:
        unique.setdefault(approval_id, fields)
    if len(unique) > MAX_ANSWERS:
        raise Refused(
            400,
            "too_many_answers",
            f"this request answers {len(unique)} gates: at most {MAX_ANSWERS} at once",
        )
    try:
        checked = {approval_id: decisions.fields_of(f) for approval_id, f in unique.items()}
    except p.FrameError as exc:
        raise Refused(400, p.E_BAD_FRAME, exc.message) from None
    gates = dict(
        ApprovalRequest.objects.filter(session_id=session.id, id__in=list(unique)).values_list(
            "id", "run_id"
        )
    )
    if len(gates) < len(unique):
        raise Refused(404, "not_found", "no such approval in this conversation")
    made = {
        approval_id: Decision.of({**f, "whole_step": False}, by, via)
        for approval_id, f in checked.items()
    }
    # Every decision checked against its gate before the first is made.
    for gate in ApprovalRequest.objects.filter(id__in=list(made)).only(
        "kind", "tool", "tool_call_id", "args"
    ):
        made[gate.id] = deciding.check_decision(gate, made[gate.id])
    run_id, after = "", 0
    for approval_id, decision in made.items():
        gate = gates[approval_id]
        with contextlib.suppress(AlreadyDecided, ApprovalCancelled):
            deciding.decide(approval_id, decision, session_id=session.id)
        run_id, after = gate, _paused_at(session.id, gate, approval_id)
    return run_id, after


def _paused_at(session_id: str, run_id: str, approval_id: str) -> int:
    """The seq of the ``run.paused`` that followed the gate's request (a
    step's gates share one), or 0."""
    logged = Event.objects.filter(session_id=session_id, run_id=run_id)
    requested = (
        logged.filter(kind=p.K_APPROVAL_REQUESTED, data__approval_id=approval_id)
        .values_list("seq", flat=True)
        .first()
    )
    if requested is None:
        return 0
    paused = logged.filter(kind=p.K_RUN_PAUSED, seq__gt=requested).order_by("seq")
    return paused.values_list("seq", flat=True).first() or 0


def active_run(session: AgentSession) -> tuple[str, int] | None:
    """The oldest run of the session that is not finished, and the seq before
    its message; None when there is none."""
    found = (
        Run.objects.filter(session=session, status__in=Run.ACTIVE)
        .order_by("created_at", "message_seq")
        .values_list("id", "message_seq")
        .first()
    )
    return None if found is None else (found[0], found[1] - 1)


@dataclass
class Turn:
    """One run on the active path: the user's message (its id, its text) and,
    once the run finished, its events but the deltas (the messages say it all)."""

    message_id: str
    text: str
    run_id: str
    finished: bool
    message_seq: int = 0
    events: list[Event] = field(default_factory=list)


# A page of turns: at most this many, and about this many bytes of their
# events (the newest turn is always whole). Older turns are fetched by
# naming the oldest run of a page (``before``).
PAGE_TURNS = 50
MAX_PAGE_TURNS = 100
PAGE_BYTES = 1024 * 1024


@dataclass
class Page:
    """The newest turns of a path that fit a page, oldest first, and the run
    to ask ``before`` for the turns older than these (None: none are)."""

    turns: list[Turn]
    before: str | None


class NoSuchTurn(LookupError):
    """``before`` names no run of the session."""


def path_turns(
    session: AgentSession,
    upto: int | None = None,
    leaf: str | None = None,
    *,
    before: str | None = None,
    max_turns: int = PAGE_TURNS,
    max_bytes: int = PAGE_BYTES,
) -> Page:
    """The newest page of the turns of the session's active path (``leaf``:
    the path to that run; ``before``: the path to that run's parent), oldest
    first: each finished run's events. At most ``max_turns`` turns, and
    ``max_bytes`` of their events and messages, read newest first and never
    past the page (a request reads a page, whatever the session holds).
    With ``upto``, the conversation as it stood then: the turns asked by
    then, each run's events up to that seq (what a client was given of a
    run that parked at a gate there, whatever happened since)."""
    if before is not None:
        if not Run.objects.filter(session=session, id=before).exists():
            raise NoSuchTurn(before)
        path = turns.ancestry(before, max_turns + 2)[:-1]
    else:
        path = turns.ancestry(leaf or session.leaf_run_id or None, max_turns + 1)
    older = len(path) > max_turns
    path = path[-max_turns:]
    out = _turns(session, path)
    path = [run_id for run_id in path if run_id in out]
    if upto is not None:
        # The conversation as it stood at ``upto``: the turns that had begun
        # by then (a regenerate since shares its message's seq, not its
        # events), every run's events cut there, finished or not.
        begun = set(
            Event.objects.filter(session_id=session.id, run_id__in=path, seq__lte=upto)
            .values_list("run_id", flat=True)
            .distinct()
        )
        path = [run_id for run_id in path if run_id in begun]
        wanted = Q(run_id__in=path, seq__lte=upto)
    else:
        wanted = Q(run_id__in=[run_id for run_id in path if out[run_id].finished])
    kept = _fill(session, path, out, wanted, max_bytes)
    older = older or kept < len(path)
    path = path[len(path) - kept :]
    return Page([out[run_id] for run_id in path], path[0] if older and path else None)


def _turns(session: AgentSession, path: list[str]) -> dict[str, Turn]:
    """The turns of these runs of the session (a run of another is none)."""
    rows = Run.objects.filter(session=session, id__in=path).values(
        "id", "client_message_id", "text", "answers_id", "status", "message_seq"
    )
    by_id = {row["id"]: row for row in rows}
    asked = {row["id"]: row["client_message_id"] for row in rows}
    asked.update(
        Run.objects.filter(
            session=session, id__in={row["answers_id"] for row in rows} - {None}
        ).values_list("id", "client_message_id")
    )
    return {
        run_id: Turn(
            asked.get(row["answers_id"] or run_id, ""),
            row["text"],
            run_id,
            row["status"] == Run.Status.FINISHED,
            row["message_seq"],
        )
        for run_id, row in by_id.items()
    }


def _fill(session: AgentSession, path: list[str], out: dict[str, Turn], wanted, max_bytes) -> int:
    """Give the newest turns of ``path`` their events, read newest first,
    while their messages and events fit ``max_bytes`` (the newest turn is
    kept whole whatever it holds); how many of the newest turns are kept."""
    if not path:
        return 0
    position = {run_id: i for i, run_id in enumerate(path)}
    newest = len(path) - 1
    used, charged = 0, len(path)  # the turns from ``charged`` on are counted

    def count_down_to(index: int) -> bool:
        """Count the user messages of the turns down to ``index``; False
        once one (but the newest) does not fit."""
        nonlocal used, charged
        while charged > index:
            charged -= 1
            used += len(out[path[charged]].text)
            if used > max_bytes and charged < newest:
                return False
        return True

    kept_from = 0
    events = (
        Event.objects.filter(wanted, session_id=session.id)
        .exclude(kind=p.K_ASSISTANT_DELTA)
        .order_by("-seq")
    )
    for event in events.iterator(chunk_size=200):
        at = position[event.run_id]
        if not count_down_to(at):
            kept_from = charged + 1
            break
        used += len(json.dumps(event.data))
        if used > max_bytes and at < newest:
            kept_from = at + 1
            break
        out[event.run_id].events.append(event)
    else:
        if not count_down_to(0):
            kept_from = charged + 1
    for run_id in path[:kept_from]:
        out[run_id].events.clear()
    for run_id in path[kept_from:]:
        out[run_id].events.reverse()
    return len(path) - kept_from


def run_to_resume(session: AgentSession, run_id: str) -> tuple[str, int] | None:
    """That run of the session (a page's cursor: the first run its messages
    left out, finished since or not) and a seq before its first event; None
    if the session has no such run."""
    found = Run.objects.filter(session=session, id=run_id).values_list("message_seq").first()
    return None if found is None else (run_id, found[0] - 1)
