"""Decided calls (sessions_app/runtime/toolcalls.py), driven in this process
(``execute_run``, nothing enqueued): a step's calls run in the model's order,
each once, across a worker lost between two of them; a call cut by a crash
inside a step is asked again in its place; a run that continued while a gate
of its step still waited parks again; an edit runs the person's arguments
and a response runs nothing."""

from __future__ import annotations

import pytest

from sessions_app.log.events import read_events
from sessions_app.log.sessions import create_session
from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime import deciding, durable, registry, turns
from sessions_app.runtime.executor import execute_run
from sessions_app.runtime.gates import Decision
from sessions_app.runtime.tools import workspace_for
from sessions_app.server.identity import worker_id
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import SessionError

pytestmark = pytest.mark.django_db(transaction=True)


def _step(user, n: int = 3) -> tuple[str, str, list[ApprovalRequest]]:
    """A run parked at ``/parallel n``: its session, run and gates in order."""
    s = create_session(user)
    run_id = turns.submit_message(s.id, "m1", f"/parallel {n} s.txt").run_id
    execute_run(run_id)
    gates = sorted(ApprovalRequest.objects.filter(run_id=run_id), key=lambda g: g.args["text"])
    return s.id, run_id, gates


def _approve_all(gates) -> None:
    for gate in gates:
        deciding.decide(gate.id, Decision(p.APPROVE, "alice", "tab"))


def _taken_over_at(monkeypatch, run_id: str, text: str, *, before: bool) -> list[str]:
    """The run is taken from this worker (its lease lapsed: the sweeper gave
    it back to the queue, ``durable.release``) while the call writing
    ``text`` runs: ``before`` it writes, or right after. The drive then
    finds the run no longer its own at the result (nothing logged) and
    stops. Returns what the release did (``resumed``, or ``error``)."""
    real = registry.execute
    released: list[str] = []

    def taken(tool, args, workspace, call_id):
        if args.get("text") != text or released:  # the next drive runs as it would
            return real(tool, args, workspace, call_id)
        out = (True, "not run") if before else real(tool, args, workspace, call_id)
        released.append(durable.release(run_id, worker_id(), p.RESUMED_TAKEOVER))
        return out

    monkeypatch.setattr(registry, "execute", taken)
    return released


def _lines(session_id: str) -> list[str]:
    return (workspace_for(session_id) / "s.txt").read_text().splitlines()


def _results(session_id: str) -> list[tuple[str, bool]]:
    return [
        (e.data["tool_call_id"], e.data["ok"])
        for e in read_events(session_id, 0)
        if e.kind == p.K_TOOL_RESULT
    ]


def test_a_worker_lost_between_two_calls_of_a_step_runs_each_once(user, no_enqueue, monkeypatch):
    """The worker dies right after the second call wrote (no result logged):
    the run taken over goes on after the first result, runs the second again
    (write_file is idempotent: it appends once per call) and the third, and
    the agent answers all three, in order."""
    sid, run_id, gates = _step(user)
    _approve_all(gates)
    assert _taken_over_at(monkeypatch, run_id, "write 2", before=False) == []
    execute_run(run_id)
    saved = Run.objects.get(id=run_id).state
    assert saved["gates"] == [g.tool_call_id for g in gates[1:]]
    assert [o["tool_call_id"] for o in saved["outcomes"]] == [gates[0].tool_call_id]
    execute_run(run_id)
    assert _lines(sid) == ["write 1", "write 2", "write 3"]
    assert _results(sid) == [(g.tool_call_id, True) for g in gates]
    [message] = [e.data["text"] for e in read_events(sid, 0) if e.kind == p.K_ASSISTANT_MESSAGE]
    assert [line[:12] for line in message.splitlines()] == [
        "1. Wrote to ",
        "2. Wrote to ",
        "3. Wrote to ",
    ]
    assert Run.objects.get(id=run_id).stop_reason == p.STOP_END_TURN


def test_a_call_cut_by_a_crash_in_a_step_is_asked_again_in_its_place(user, no_enqueue, monkeypatch):
    """Not idempotent, the second call cut by a lost worker is logged
    unknown and asked again (kind unknown_outcome), the third waiting behind
    it; approved, it runs, then the third, and the agent answers three calls."""
    monkeypatch.setattr(registry, "is_idempotent", lambda tool: False)
    sid, run_id, gates = _step(user)
    _approve_all(gates)
    _taken_over_at(monkeypatch, run_id, "write 2", before=True)
    execute_run(run_id)
    execute_run(run_id)
    again = ApprovalRequest.objects.get(run_id=run_id, status="pending")
    assert again.kind == "unknown_outcome" and again.args == gates[1].args
    state = Run.objects.get(id=run_id).state
    assert state["gates"] == [again.tool_call_id, gates[2].tool_call_id]
    deciding.decide(again.id, Decision(p.APPROVE, "alice", "tab"))
    execute_run(run_id)
    assert _lines(sid) == ["write 1", "write 2", "write 3"]
    assert _results(sid) == [
        (gates[0].tool_call_id, True),
        (gates[1].tool_call_id, False),  # unknown
        (again.tool_call_id, True),
        (gates[2].tool_call_id, True),
    ]
    [message] = [e.data["text"] for e in read_events(sid, 0) if e.kind == p.K_ASSISTANT_MESSAGE]
    assert len(message.splitlines()) == 3


def test_a_run_continued_with_a_gate_of_its_step_waiting_parks_again(user, no_enqueue):
    """A continuation that finds a gate of its step still pending (a decision
    made by a version that knew no steps) runs nothing and parks again; the
    last decision continues it."""
    sid, run_id, gates = _step(user, 2)
    deciding.decide(gates[0].id, Decision(p.APPROVE, "alice", "tab"))
    Run.objects.filter(id=run_id).update(status=Run.Status.RUNNING)  # as the old version did
    execute_run(run_id)
    assert Run.objects.get(id=run_id).status == Run.Status.AWAITING_APPROVAL
    assert _results(sid) == []
    deciding.decide(gates[1].id, Decision(p.APPROVE, "alice", "tab"))
    execute_run(run_id)
    assert _lines(sid) == ["write 1", "write 2"]


def test_an_edit_runs_the_persons_arguments_and_keeps_the_models(user, no_enqueue):
    """Edit: the tool runs with the edited arguments, the row keeps both,
    the log says what ran, and arguments the tool refuses decide nothing."""
    s = create_session(user)
    run_id = turns.submit_message(s.id, "m1", "/write a.txt hi").run_id
    execute_run(run_id)
    gate = ApprovalRequest.objects.get(run_id=run_id)
    with pytest.raises(SessionError, match="not write_file's"):
        deciding.decide(gate.id, Decision(p.EDIT, "alice", "tab", args={"path": "b.txt"}))
    edited = {"path": "b.txt", "text": "edited"}
    deciding.decide(gate.id, Decision(p.EDIT, "alice", "tab", args=edited))
    execute_run(run_id)
    gate.refresh_from_db()
    assert (gate.status, gate.args, gate.edited_args) == (
        "edited",
        {"path": "a.txt", "text": "hi"},
        edited,
    )
    ws = workspace_for(s.id)
    assert (ws / "b.txt").read_text() == "edited\n" and not (ws / "a.txt").exists()
    decided = [e.data for e in read_events(s.id, 0) if e.kind == p.K_APPROVAL_DECIDED]
    assert decided == [
        {"approval_id": gate.id, "decision": "edit", "decided_by": "alice", "args": edited}
    ]
    [message] = [e.data["text"] for e in read_events(s.id, 0) if e.kind == p.K_ASSISTANT_MESSAGE]
    assert message.startswith("Wrote to b.txt")


def test_a_response_instead_runs_nothing_and_is_the_result(user, no_enqueue):
    """Respond: the tool never runs; its result is the person's text, ok."""
    s = create_session(user)
    run_id = turns.submit_message(s.id, "m1", "/write a.txt hi").run_id
    execute_run(run_id)
    gate = ApprovalRequest.objects.get(run_id=run_id)
    deciding.decide(gate.id, Decision(p.RESPOND, "alice", "api", response="It is written already."))
    execute_run(run_id)
    assert not (workspace_for(s.id) / "a.txt").exists()
    results = [e.data for e in read_events(s.id, 0) if e.kind == p.K_TOOL_RESULT]
    assert results == [
        {"tool_call_id": gate.tool_call_id, "ok": True, "output": "It is written already."}
    ]
    [message] = [e.data["text"] for e in read_events(s.id, 0) if e.kind == p.K_ASSISTANT_MESSAGE]
    assert message == "You answered instead of write_file: It is written already."
    gate.refresh_from_db()
    assert (gate.status, gate.response, gate.decided_via) == (
        "answered",
        "It is written already.",
        "api",
    )


def test_a_question_or_a_whole_step_is_never_edited_or_answered(user, no_enqueue):
    """An edit or a response decides one gated call: not a question, not all."""
    sid, run_id, gates = _step(user, 2)
    with pytest.raises(SessionError, match="not a question or a step"):
        whole = Decision(p.RESPOND, "alice", "tab", whole_step=True, response="x")
        deciding.decide(gates[0].id, whole)
    ApprovalRequest.objects.filter(id=gates[1].id).update(kind="question")
    with pytest.raises(SessionError, match="not a question or a step"):
        deciding.decide(gates[1].id, Decision(p.EDIT, "alice", "tab", args={}))
    assert set(ApprovalRequest.objects.values_list("status", flat=True)) == {"pending"}


def test_a_run_failing_mid_step_leaves_no_call_without_its_result(
    user, no_enqueue, monkeypatch, settings
):
    """The crash budget spent on the second call of three: it is logged
    unknown, the third 'cancelled before it ran', then run.finished error."""
    settings.AGENT_RUN_MAX_CRASHES = 1
    sid, run_id, gates = _step(user)
    _approve_all(gates)
    released = _taken_over_at(monkeypatch, run_id, "write 2", before=True)
    execute_run(run_id)
    assert released == ["error"]
    results = [e.data for e in read_events(sid, 0) if e.kind == p.K_TOOL_RESULT]
    assert [(r["tool_call_id"], r["output"]) for r in results] == [
        (gates[0].tool_call_id, results[0]["output"]),
        (gates[1].tool_call_id, durable.UNKNOWN_OUTPUT),
        (gates[2].tool_call_id, "cancelled before it ran"),
    ]
    assert [e.kind for e in read_events(sid, 0)][-1] == p.K_RUN_FINISHED
