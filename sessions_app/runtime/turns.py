"""New turns of a conversation: a send (queued, or "stop and send"), a
regenerated answer, an edited message, and switching the active path.

A session's turns form a tree (docs/protocol.md, "Branches"). Each run is a
turn: it follows its parent run (``Run.parent_id``) and answers one
user.message (its own, or for a regenerated answer the one of the run it
regenerates, ``Run.answers_id``). The session's leaf (``leaf_run_id``) ends the
active path: a new input follows it, a regenerate or an edit makes its new run
the leaf, and a switch moves it (``branch.switched``). A run that is not on the
new path stops: it is cancelled, and its open gates close as cancelled, so a
decision on them is refused and their tools never run. Every one of these is
one transaction under the session's lock, like every run transition
(``runs``), and its events commit with it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from sessions_app import fanout
from sessions_app.log.events import NewEvent, append_event, append_events
from sessions_app.log.sessions import title_from
from sessions_app.models import AgentSession, Run, new_run_id
from sessions_app.runtime import cancels, lifecycle, questions, runs
from sessions_app.runtime.locks import lock_session, queued_runs, set_session_status
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import ApprovalPending, NotFound, SessionFull, TooManyRuns


@dataclass(frozen=True)
class SendResult:
    client_message_id: str
    seq: int
    run_id: str
    status: str


class BehindGate(enum.Enum):
    """What a new input does while a gate waits in its session (a tool's
    approval, or a question a running tool asked): the transport's rule, one
    object. The socket and the REST API queue it behind the gate; the chat
    dialects refuse it (their clients answer a gate; they do not send past
    one). "Stop and send" (an interrupt) is never refused."""

    QUEUE = "queue"
    REFUSE = "refuse"

    def check(self, session_id: str, interrupt: bool) -> None:
        """``ApprovalPending`` if this rule refuses the input now (under the
        session's lock)."""
        if self is BehindGate.QUEUE or interrupt:
            return
        gated = Run.objects.filter(session_id=session_id, status=Run.Status.AWAITING_APPROVAL)
        if gated.exists() or questions.waiting(session_id):
            raise ApprovalPending()


@dataclass(frozen=True)
class Sender:
    """Who sends, and by which transport's rule: ``by`` names them (for a gate
    an interrupt closes), ``trace`` is the send's traceparent, which its run
    continues (``server.tracing``), and ``behind_gate`` what an input does
    while a gate waits (``BehindGate``)."""

    by: str = ""
    trace: str = ""
    behind_gate: BehindGate = BehindGate.QUEUE


@dataclass(frozen=True)
class NewTurn:
    """A new turn (``open_turn``'s request). ``message``: the user.message's
    data, or None for a regenerated answer (``answers``: the run whose
    message it answers again). ``follow``: more data for its run.started /
    run.queued. ``jump``: start it at once, ahead of the queued inputs (they
    stay queued), as after an interrupt."""

    client_message_id: str
    text: str
    parent: str | None
    message: dict | None
    answers: Run | None = None
    follow: dict | None = None
    jump: bool = False
    trace: str = ""


def submit_message(
    session_id: str,
    client_message_id: str,
    text: str,
    *,
    interrupt: bool = False,
    sender: Sender = Sender(),  # noqa: B008 (frozen: one shared default is safe)
) -> SendResult:
    """Log a user input once per ``client_message_id`` and start or queue its
    run. With ``interrupt`` ("stop and send") the session's active run is
    cancelled first, saying why, and this input's run starts at once, ahead
    of the inputs already queued (they stay queued)."""
    return _once(_submit, session_id, client_message_id, text, interrupt, sender)


def _submit(
    session: AgentSession, client_message_id: str, text: str, interrupt: bool, sender: Sender
) -> SendResult:
    session_id = session.id
    sender.behind_gate.check(session_id, interrupt)
    if interrupt:
        active = Run.objects.filter(session_id=session_id, status__in=runs.EXECUTING).first()
        if active is not None:
            # Under the same session lock: nothing starts in between, and
            # the queued inputs are not started by the cancel (``start_next``).
            waiting = cancels.waiting_after_cancel(active.id)
            runs.cancel_locked(active, sender.by, p.STOPPED_FOR_NEW_MESSAGE, start_next=False)
            if waiting is not None:
                # An earlier stop and send, still waiting for the tool: this
                # newer one replaces it, as it would have stopped it running.
                runs.cancel_locked(waiting, sender.by, p.STOPPED_FOR_NEW_MESSAGE, start_next=False)
    # A new input continues the active path: it follows the session's leaf.
    message = {"client_message_id": client_message_id, "text": text}
    turn = NewTurn(client_message_id, text, session.leaf_run_id or None, message)
    return open_turn(session, replace(turn, jump=interrupt, trace=sender.trace))


def existing_send(session_id: str, client_message_id: str) -> SendResult | None:
    """The answer to a repeated ``client_message_id`` (the caller holds the session lock)."""
    existing = Run.objects.filter(
        session_id=session_id, client_message_id=client_message_id
    ).first()
    if existing is None:
        return None
    return SendResult(client_message_id, existing.message_seq, existing.id, p.SEND_DUPLICATE)


def open_turn(session: AgentSession, turn: NewTurn) -> SendResult:
    """Log a new turn and start or queue its run (the caller holds the session
    lock). The new run is the session's leaf: the active path ends with it."""
    busy, behind, waiting_for = _room_for(session, turn.jump)
    run_id = new_run_id()
    started = NewEvent(
        p.K_RUN_QUEUED if busy else p.K_RUN_STARTED,
        {"client_message_id": turn.client_message_id, **(turn.follow or {})},
        run_id,
    )
    if turn.message is not None:
        user_event, _ = append_events(
            session.id, [NewEvent(p.K_USER_MESSAGE, turn.message, run_id), started]
        )
        message_seq = user_event.seq
    else:
        append_events(session.id, [started])
        message_seq = turn.answers.message_seq
    Run.objects.create(
        id=run_id,
        session_id=session.id,
        client_message_id=turn.client_message_id,
        text=turn.text,
        message_seq=message_seq,
        parent_id=turn.parent,
        answers_id=None if turn.answers is None else (turn.answers.answers_id or turn.answers.id),
        trace=turn.trace,
        **lifecycle.born(queued=busy),
    )
    _make_leaf(session, run_id, turn.text)
    if not behind:
        set_session_status(session, AgentSession.Status.RUNNING)
    if waiting_for is not None:
        cancels.start_after_cancel(waiting_for.id, run_id)
    if not busy:
        runs.enqueue(run_id)
    elif not behind:
        # Held back by the user's limit alone: look again once this commits,
        # in case room was freed meanwhile (the sweeper is only the net).
        runs.admit_after_commit(session.owner_id)
    status = p.SEND_QUEUED if busy else p.SEND_STARTED
    return SendResult(turn.client_message_id, message_seq, run_id, status)


def _room_for(session: AgentSession, jump: bool) -> tuple[bool, bool, Run | None]:
    """Whether a new turn waits (``busy``), whether behind its own session
    (``behind``), and the cancelled run it starts after (``jump``); refused
    past the session's run cap (``SessionFull``) or the user's queue
    (``TooManyRuns``)."""
    cap = settings.AGENT_SESSION_MAX_RUNS
    if cap and Run.objects.filter(session_id=session.id).order_by()[cap - 1 : cap].exists():
        raise SessionFull()
    waiting_for = None
    if jump:
        # A session has one executing run at most, and the caller cancelled
        # it. One whose approved tool is running finishes right after the
        # tool (runs.cancel_locked): the new run waits for that, and starts
        # next, ahead of the queued inputs.
        waiting_for = Run.objects.filter(session_id=session.id, status__in=runs.EXECUTING).first()
        behind = waiting_for is not None
    else:
        # Behind the session's active run, or its queue.
        behind = Run.objects.filter(session_id=session.id, status__in=Run.ACTIVE).exists()
    # Not behind a run of its own session, but over its user's limit: it
    # waits, visibly queued, for one of the user's runs to end.
    busy = behind or not runs.user_has_room(session.owner_id)
    if busy and queued_runs(session.owner_id) >= settings.AGENT_USER_MAX_QUEUED_RUNS:
        # Queued work is promised work (and spend, with a paid model):
        # past the limit the input is refused, visibly, not queued.
        raise TooManyRuns(limit=settings.AGENT_USER_MAX_QUEUED_RUNS)
    return busy, behind, waiting_for


def _make_leaf(session: AgentSession, run_id: str, text: str) -> None:
    """The new run ends the active path; an unnamed session is named after
    its first message."""
    changed = {"leaf_run_id": run_id}
    session.leaf_run_id = run_id
    if not session.title:
        session.title = changed["title"] = title_from(text)
        fanout.title_changed_on_commit(session.owner_id, session.id, session.title)
    AgentSession.objects.filter(id=session.id).update(**changed)


def send(session_id: str, send: p.Send, sender: Sender) -> SendResult:
    """Every kind of ``send`` (the socket's and ``POST …/messages/``): a new
    input, a regenerate or an edit, once per ``client_message_id``."""
    cmid = send.client_message_id
    if send.regenerate is not None:
        return _once(_branch, session_id, cmid, send.regenerate, None, sender)
    if send.edit_of is not None:
        return _once(_branch, session_id, cmid, send.edit_of, send.text, sender)
    return submit_message(session_id, cmid, send.text, interrupt=send.interrupt, sender=sender)


def edit(
    session_id: str, client_message_id: str, run_id: str, text: str, *, by: str = ""
) -> SendResult:
    """Send ``text`` as a new version of run ``run_id``'s message: a new
    user.message and run beside it (its parent's child), now the leaf. The
    turns that followed the old message stay on their branch."""
    return _once(_branch, session_id, client_message_id, run_id, text, Sender(by=by))


def _once(fn, session_id: str, client_message_id: str, *args) -> SendResult:
    """``fn(session, client_message_id, *args)`` in one transaction under the
    session's lock, unless the id was sent before (then its first result)."""
    try:
        with transaction.atomic():
            session = lock_session(session_id)
            existing = existing_send(session_id, client_message_id)
            if existing is not None:
                return existing
            return fn(session, client_message_id, *args)
    except IntegrityError:
        # Only reachable if two writers bypassed the session lock; the
        # unique constraint still guarantees one run per input.
        run = Run.objects.get(session_id=session_id, client_message_id=client_message_id)
        return SendResult(client_message_id, run.message_seq, run.id, p.SEND_DUPLICATE)


def _branch(
    session: AgentSession, client_message_id: str, run_id: str, text: str | None, sender: Sender
) -> SendResult:
    """A regenerate (``text`` None) or an edit of run ``run_id``."""
    session_id = session.id
    target = Run.objects.filter(session_id=session_id, id=run_id).first()
    if target is None:
        raise NotFound("no such run in this session")
    # The new turn's path is the target's, without the target: every run
    # not on it stops, and so does the executing run wherever it is (as a
    # "stop and send" does): no two runs of a session ever execute at once
    # (one whose tool is running stops after it, and the new one waits).
    keep = set(ancestry(target.parent_id))
    _leave(session, keep, sender.by, p.STOPPED_FOR_NEW_MESSAGE, executing_too=True)
    # A turn it follows that is still queued (an edit of a queued message)
    # runs first: the new run queues behind it, in the path's order.
    jump = not Run.objects.filter(
        session_id=session_id, id__in=keep, status=Run.Status.QUEUED
    ).exists()
    if text is None:
        follow = {"regenerates": target.id, "parent_run_id": target.parent_id}
        turn = NewTurn(client_message_id, target.text, target.parent_id, None, target, follow)
    else:
        message = {
            "client_message_id": client_message_id,
            "text": text,
            "edits": target.answers_id or target.id,
            "parent_run_id": target.parent_id,
        }
        turn = NewTurn(client_message_id, text, target.parent_id, message)
    return open_turn(session, replace(turn, jump=jump, trace=sender.trace))


def switch(session_id: str, run_id: str, *, by: str = "") -> list[str]:
    """Make the active path go through run ``run_id``: the leaf becomes the
    newest run of its subtree (``branch.switched``), and the runs left behind
    stop (their gates close as cancelled). Returns the new path, root first;
    switching to the path already shown changes nothing and logs nothing."""
    with transaction.atomic():
        session = lock_session(session_id)
        leaf = newest_leaf_below(session_id, run_id)
        if leaf is None:
            raise NotFound("no such run in this session")
        path = ancestry(leaf)
        if leaf == session.leaf_run_id:
            return path
        _leave(session, set(path), by, p.STOPPED_FOR_BRANCH, executing_too=False)
        append_event(session_id, p.K_BRANCH_SWITCHED, {"leaf_run_id": leaf})
        AgentSession.objects.filter(id=session_id).update(leaf_run_id=leaf)
        session.leaf_run_id = leaf
        # What the new path still has queued may start now.
        runs.start_next_run(session)
    return path


def _leave(
    session: AgentSession, keep: set[str], by: str, message: str, *, executing_too: bool
) -> None:
    """Stop every active run of the session not in ``keep`` (and, with
    ``executing_too``, the executing one wherever it is); their open gates
    close as cancelled. Nothing queued starts from this: the caller decides."""
    for run in Run.objects.filter(session_id=session.id, status__in=Run.ACTIVE).order_by(
        "message_seq"
    ):
        if run.id in keep and not (executing_too and run.status in runs.EXECUTING):
            continue
        runs.cancel_locked(run, by, message, start_next=False, gates=p.GATE_CANCELLED)


# --- the tree -------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One run as a node of the session's tree."""

    parent_id: str | None
    answers_id: str | None
    order: int  # creation order in the session (0 first)


_RUNS = Run._meta.db_table
# The walks below are SQL's recursive queries (PostgreSQL and SQLite alike),
# on the primary key going up and the (session, parent_id) index going down:
# what they cost is the path's length or the subtree's size, never the
# session's run count.
_UP = f"""
WITH RECURSIVE up(id, parent_id, n) AS (
    SELECT id, parent_id, 1 FROM {_RUNS} WHERE id = %s
    UNION ALL
    SELECT r.id, r.parent_id, up.n + 1 FROM {_RUNS} r JOIN up ON r.id = up.parent_id
    WHERE up.n < %s
)
SELECT id FROM up ORDER BY n DESC
"""  # noqa: S608 (a table name, no input)
_DOWN = f"""
WITH RECURSIVE down(id) AS (
    SELECT id FROM {_RUNS} WHERE id = %s AND session_id = %s
    UNION
    SELECT r.id FROM {_RUNS} r JOIN down ON r.parent_id = down.id WHERE r.session_id = %s
)
SELECT r.id FROM {_RUNS} r JOIN down ON r.id = down.id
ORDER BY r.created_at DESC, r.message_seq DESC LIMIT 1
"""  # noqa: S608 (a table name, no input)


def ancestry(run_id: str | None, limit: int | None = None) -> list[str]:
    """The runs from the root to ``run_id`` (the last ``limit`` of them), root
    first ([] for None): one query, as long as the path."""
    if run_id is None:
        return []
    with connection.cursor() as cursor:
        # Unlimited: the path is as long as it is (a cycle is impossible: a
        # run's parent exists before it), bounded only against corrupt rows.
        cursor.execute(_UP, [run_id, limit or 10**9])
        return [row[0] for row in cursor.fetchall()]


def newest_leaf_below(session_id: str, run_id: str) -> str | None:
    """The newest run whose path goes through ``run_id`` (itself if none; None
    if the session has no such run): the newest of a subtree has no children,
    so it is a leaf. One query, as large as the subtree."""
    with connection.cursor() as cursor:
        cursor.execute(_DOWN, [run_id, session_id, session_id])
        found = cursor.fetchone()
    return found[0] if found else None


def path_to(tree: dict[str, Turn], leaf: str | None) -> list[str]:
    """The runs from the root to ``leaf``, root first ([] for None)."""
    path: list[str] = []
    seen: set[str] = set()
    while leaf is not None and leaf in tree and leaf not in seen:
        seen.add(leaf)
        path.append(leaf)
        leaf = tree[leaf].parent_id
    path.reverse()
    return path


def tree_of(session_id: str) -> dict:
    """The session's tree and active path, as ``GET …/tree/`` returns them."""
    session = AgentSession.objects.filter(id=session_id).values_list("leaf_run_id").first()
    if session is None:
        raise NotFound("this session no longer exists")
    runs = list(
        Run.objects.filter(session_id=session_id)
        .order_by("created_at", "message_seq")
        .values(
            "id",
            "parent_id",
            "answers_id",
            "client_message_id",
            "message_seq",
            "status",
            "stop_reason",
        )
    )
    tree = {r["id"]: Turn(r["parent_id"], r["answers_id"], i) for i, r in enumerate(runs)}
    leaf = session[0] or None
    return {
        "leaf_run_id": leaf,
        "path": path_to(tree, leaf),
        "runs": [
            {
                "run_id": r["id"],
                "parent_run_id": r["parent_id"],
                "answers_run_id": r["answers_id"] or r["id"],
                "client_message_id": r["client_message_id"],
                "message_seq": r["message_seq"],
                "status": r["status"],
                "stop_reason": r["stop_reason"],
            }
            for r in runs
        ],
    }


def history_path(session_id: str, run_id: str, turns: int) -> list[str]:
    """The last ``turns`` runs before ``run_id`` on its path, oldest first
    (what its agent sees as the conversation so far)."""
    return ancestry(run_id, turns + 1)[:-1]
