"""The sweeper: expired leases are taken over from their last checkpoint, a
step that keeps killing its worker ends the run 'error', dead servers'
sockets stop counting."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from prometheus_client import REGISTRY

from sessions_app.fanout.presence import close_stale_connections, touch_connections
from sessions_app.log.events import read_events
from sessions_app.log.sessions import create_session
from sessions_app.models import ApprovalRequest, Connection, Run
from sessions_app.runtime import deciding, durable, runs, turns
from sessions_app.runtime.gates import Decision, Gate
from sessions_app.runtime.sweeper import take_over_expired

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_sweeper_thread(no_sweeper):
    """Every test here: no sweeper thread of an earlier test sweeps meanwhile."""


def _expire(run_id: str, worker: str = "dead:1:x") -> None:
    Run.objects.filter(id=run_id).update(
        worker=worker, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def test_expired_lease_is_taken_over_at_its_checkpoint(user, no_enqueue):
    """A running run whose lease expired goes back to the queue at its last
    checkpoint with run.resumed (takeover, keep); it is not finished and the
    queued run behind it does not start; the metrics count a takeover and a
    step redone."""
    s = create_session(user)
    first = turns.submit_message(s.id, "a", "/stream 5 0")
    second = turns.submit_message(s.id, "b", "/stream 1 0")
    Run.objects.filter(id=first.run_id).update(state={"agent": {"next": 3}, "keep": 15})
    _expire(first.run_id)
    taken = REGISTRY.get_sample_value("agent_runs_taken_over_total")
    redone = REGISTRY.get_sample_value("agent_steps_redone_total")
    assert take_over_expired() == [first.run_id]
    run = Run.objects.get(id=first.run_id)
    assert (run.status, run.worker, run.stop_reason) == ("running", "", "")
    assert run.state == {"agent": {"next": 3}, "keep": 15, "crashes": 1}
    assert Run.objects.get(id=second.run_id).status == "queued"
    last = read_events(s.id, 0)[-1]
    assert (last.kind, last.run_id, last.data) == (
        "run.resumed",
        first.run_id,
        {"reason": "takeover", "keep": 15},
    )
    assert no_enqueue == [first.run_id, first.run_id]
    assert REGISTRY.get_sample_value("agent_runs_taken_over_total") == taken + 1
    assert REGISTRY.get_sample_value("agent_steps_redone_total") == redone + 1


def test_a_step_that_kills_its_worker_three_times_ends_the_run(user, no_enqueue, settings):
    """The crash budget: the third takeover in one step finishes the run
    'error' with a message that says why, and the queued run starts."""
    settings.AGENT_RUN_MAX_CRASHES = 3
    s = create_session(user)
    first = turns.submit_message(s.id, "a", "/stream 5 0")
    second = turns.submit_message(s.id, "b", "/stream 1 0")
    for _ in range(2):
        _expire(first.run_id)
        assert take_over_expired() == [first.run_id]
    _expire(first.run_id)
    assert take_over_expired() == [first.run_id]
    run = Run.objects.get(id=first.run_id)
    assert (run.status, run.stop_reason) == ("finished", "error")
    assert run.error == durable.crash_limit_message(3)
    assert Run.objects.get(id=second.run_id).status == "running"
    kinds = [e.kind for e in read_events(s.id, 0) if e.run_id == first.run_id]
    assert kinds.count("run.resumed") == 2 and kinds[-1] == "run.finished"


def test_a_checkpoint_resets_the_crash_budget(user, no_enqueue):
    """Crashes count per step: a checkpoint after a takeover starts afresh."""
    s = create_session(user)
    r = turns.submit_message(s.id, "a", "/stream 5 0")
    _expire(r.run_id)
    take_over_expired()
    _expire(r.run_id, "w:2:y")
    with transaction.atomic():
        state = durable.save_checkpoint(r.run_id, "w:2:y", {"agent": {"next": 4}, "keep": 20})
    assert state["crashes"] == 0 and state["agent"] == {"next": 4}


def test_handover_does_not_count_as_a_crash(user, no_enqueue):
    """A stopping worker's release logs run.resumed (handover) and spends
    nothing of the crash budget."""
    s = create_session(user)
    r = turns.submit_message(s.id, "a", "/stream 5 0")
    Run.objects.filter(id=r.run_id).update(worker="w:1:x")
    assert durable.release(r.run_id, "w:1:x", "handover") == "resumed"
    run = Run.objects.get(id=r.run_id)
    assert run.worker == "" and run.state.get("crashes", 0) == 0
    assert read_events(s.id, 0)[-1].data == {"reason": "handover", "keep": 0}
    assert durable.release(r.run_id, "w:1:x", "handover") is None  # not its any more


def test_live_lease_and_parked_gates_are_untouched(user, no_enqueue):
    """A run with a live lease, and a run parked at a gate, are left alone."""
    s = create_session(user)
    r = turns.submit_message(s.id, "a", "x")
    Run.objects.filter(id=r.run_id).update(
        worker="w:1:x", lease_expires_at=timezone.now() + timedelta(seconds=30)
    )
    parked = runs.park(
        r.run_id,
        "w:1:x",
        s.id,
        [Gate("call_1", "write_file", {"path": "a", "text": "b"})],
        state={},
    )
    assert parked
    Run.objects.filter(id=r.run_id).update(lease_expires_at=timezone.now() - timedelta(hours=1))
    assert take_over_expired() == []
    assert Run.objects.get(id=r.run_id).status == "awaiting_approval"


def test_dead_servers_sockets_stop_counting(user):
    """Rows no server touched for a while are closed; touched ones stay open.
    (In production the shared servers' sweepers read the same database: the
    rows commit together, the alive one touched, and whichever sweeper comes
    first closes the dead one.)"""
    s = create_session(user)
    old = timezone.now() - timedelta(minutes=5)
    with transaction.atomic():
        dead = Connection.objects.create(user=user, session=s, server_id="dead", seen_at=old)
        alive = Connection.objects.create(user=user, session=s, server_id="alive", seen_at=old)
        touch_connections("alive")
    assert close_stale_connections() in ([s.id], [])
    dead.refresh_from_db()
    alive.refresh_from_db()
    assert dead.closed_at is not None and dead.clean is False
    assert alive.closed_at is None


def test_run_whose_task_was_lost_is_handed_over_again(user, no_enqueue):
    """A started run no executor claimed by its pickup deadline is re-enqueued, not
    interrupted (its task was lost); one within its deadline is left alone."""
    from sessions_app.runtime.sweeper import requeue_unclaimed

    s = create_session(user)
    r = turns.submit_message(s.id, "a", "x")
    assert requeue_unclaimed() == []
    Run.objects.filter(id=r.run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert take_over_expired() == []
    assert requeue_unclaimed() == [r.run_id]
    run = Run.objects.get(id=r.run_id)
    assert run.status == "running" and run.lease_expires_at > timezone.now()
    assert no_enqueue == [r.run_id, r.run_id]


def test_sweep_does_not_take_over_a_renewed_lease(user, no_enqueue):
    """The takeover re-checks expiry under the lock: a renewal since the sweep read wins."""
    s = create_session(user)
    r = turns.submit_message(s.id, "a", "x")
    Run.objects.filter(id=r.run_id).update(
        worker="w:1:x", lease_expires_at=timezone.now() + timedelta(seconds=30)
    )
    assert durable.release(r.run_id, "w:1:x", "takeover", lease_expired=True) is None
    assert Run.objects.get(id=r.run_id).worker == "w:1:x"


def test_cancel_after_decision_before_continuation_logs_the_result(user, no_enqueue):
    """Cancelling a run whose gate was approved but whose continuation has not run yet
    logs a failed tool.result for that call, and the tool can no longer run."""
    from sessions_app.models import ApprovalRequest

    s = create_session(user)
    r = turns.submit_message(s.id, "a", "/write f x")
    Run.objects.filter(id=r.run_id).update(worker="w:1:x")
    (approval_id,) = runs.park(
        r.run_id,
        "w:1:x",
        s.id,
        [Gate("call_1", "write_file", {"path": "f", "text": "x"})],
        state={"gate": "call_1"},
    )
    deciding.decide(approval_id, Decision("approve", "alice", "tab"))
    runs.cancel(r.run_id, "alice")
    tail = [(e.kind, e.data) for e in read_events(s.id, 0)][-3:]
    assert tail[0][0] == "approval.decided"
    assert tail[1] == (
        "tool.result",
        {"tool_call_id": "call_1", "ok": False, "output": "cancelled before it ran"},
    )
    assert tail[2] == ("run.finished", {"stop_reason": "cancelled"})
    assert ApprovalRequest.objects.get(id=approval_id).executed_at is not None


def test_user_limit_queues_and_admits_across_sessions(user, other_user, no_enqueue, settings):
    """Over AGENT_USER_MAX_RUNS a run is queued (run.queued), another user's is not;
    when one of the user's runs finishes the oldest waiting one starts."""
    settings.AGENT_USER_MAX_RUNS = 1
    a, b = create_session(user), create_session(user)
    first = turns.submit_message(a.id, "m1", "/stream 1 0")
    second = turns.submit_message(b.id, "m2", "/stream 1 0")
    theirs = turns.submit_message(create_session(other_user).id, "m3", "/stream 1 0")
    assert (first.status, second.status, theirs.status) == ("started", "queued", "started")
    assert [e.kind for e in read_events(b.id, 0)][-1] == "run.queued"
    assert no_enqueue == [first.run_id, theirs.run_id]
    runs.finish_run(first.run_id, "end_turn")
    assert no_enqueue == [first.run_id, theirs.run_id, second.run_id]
    assert [e.kind for e in read_events(b.id, 0)][-2:] == ["run.queued", "run.started"]
    assert Run.objects.get(id=second.run_id).status == "running"


def test_sweeper_admits_a_waiting_run_whose_admission_was_lost(user, no_enqueue, settings):
    """A run left queued with room for it (its admission died with a process) is
    started by the sweeper's pass."""
    settings.AGENT_USER_MAX_RUNS = 1
    a, b = create_session(user), create_session(user)
    first = turns.submit_message(a.id, "m1", "/stream 1 0")
    second = turns.submit_message(b.id, "m2", "/stream 1 0")
    Run.objects.filter(id=first.run_id).update(status="finished")  # no admission ran
    assert runs.admit_all_waiting() == []  # younger than a lease: being admitted
    # In one transaction: a test server's sweeper (another process on this
    # database) must not see the run waiting before this pass does.
    with transaction.atomic():
        Run.objects.filter(id=second.run_id).update(
            created_at=timezone.now() - timedelta(seconds=settings.AGENT_LEASE_SECONDS + 1)
        )
        assert runs.admit_all_waiting() == [second.run_id]
    assert runs.admit_all_waiting() == []


@pytest.mark.postgres
def test_a_run_finishing_during_a_submit_leaves_no_run_waiting_with_room(
    user, no_enqueue, settings, monkeypatch
):
    """The user's only running run finishes while a new submit is deciding it has no
    room: the new run starts at once (not a sweeper pass later)."""

    settings.AGENT_USER_MAX_RUNS = 1
    a, b = create_session(user), create_session(user)
    first = turns.submit_message(a.id, "m1", "/stream 1 0")
    real_has_room = runs.user_has_room
    finishing = threading.Thread(target=runs.finish_run, args=(first.run_id, "end_turn"))

    def has_room_then_the_first_finishes(owner_id):
        room = real_has_room(owner_id)
        if finishing.ident is not None:  # the admissions that follow: as they are
            return room
        finishing.start()
        # Give the finish every chance to commit before this submit does (it
        # must not: the user row is locked until the submit commits).
        finishing.join(timeout=2)
        return room

    monkeypatch.setattr(runs, "user_has_room", has_room_then_the_first_finishes)
    second = turns.submit_message(b.id, "m2", "/stream 1 0")
    finishing.join(timeout=30)
    assert second.status == "queued"
    assert Run.objects.get(id=second.run_id).status == "running"
    assert no_enqueue == [first.run_id, second.run_id]


def test_a_run_ended_by_the_budget_says_its_tool_call_is_unknown(user, no_enqueue, settings):
    """A run ended by the crash budget while an approved tool had started and
    logged no result gets that result ('unknown') before its run.finished:
    no started call is left without one."""
    settings.AGENT_RUN_MAX_CRASHES = 1
    s = create_session(user)
    r = turns.submit_message(s.id, "a", "/write a.txt b")
    Run.objects.filter(id=r.run_id).update(worker="w:1:x")
    assert runs.park(
        r.run_id,
        "w:1:x",
        s.id,
        [Gate("call_started", "write_file", {"path": "a.txt", "text": "b"})],
        state={"gate": "call_started"},
    )
    deciding.decide(
        ApprovalRequest.objects.get(tool_call_id="call_started").id,
        Decision("approve", "alice", "tab"),
    )
    ApprovalRequest.objects.filter(tool_call_id="call_started").update(executed_at=timezone.now())
    _expire(r.run_id)
    assert take_over_expired() == [r.run_id]
    tail = [(e.kind, e.data) for e in read_events(s.id, 0)][-2:]
    assert tail[0] == (
        "tool.result",
        {"tool_call_id": "call_started", "ok": False, "output": durable.UNKNOWN_OUTPUT},
    )
    assert tail[1][0] == "run.finished" and tail[1][1]["stop_reason"] == "error"


def _parked_with_deadline(user, settings, seconds: float, n: int = 1):
    """A run parked at ``/parallel n`` with gates that expire in ``seconds``."""
    from sessions_app.runtime.executor import execute_run

    settings.AGENT_GATE_DEADLINE_SECONDS = seconds
    s = create_session(user)
    run_id = turns.submit_message(s.id, "m1", f"/parallel {n} d.txt").run_id
    execute_run(run_id)
    gates = sorted(ApprovalRequest.objects.filter(run_id=run_id), key=lambda g: g.args["text"])
    return s, run_id, gates


def test_a_gate_past_its_deadline_is_expired_once_and_its_run_goes_on(user, no_enqueue, settings):
    """The sweeper decides a gate past its deadline 'expired' (by 'deadline',
    through the deadline), once: a second pass finds nothing, a person after
    it is told it already stands, and the run goes on with the model told."""
    from sessions_app.runtime.executor import execute_run
    from sessions_app.runtime.sweeper import expire_due_gates
    from sessions_app.wire.errors import AlreadyDecided

    s, run_id, (gate,) = _parked_with_deadline(user, settings, 30)
    asked = [e.data for e in read_events(s.id, 0) if e.kind == "approval.requested"]
    assert asked[0]["expires_at"].endswith("Z") and gate.expires_at is not None
    assert expire_due_gates() == []  # not due yet
    # Due a minute from now (no other process's sweeper sees it due yet).
    later = timezone.now() + timedelta(minutes=1)
    assert expire_due_gates(now=later) == [gate.id]
    assert expire_due_gates(now=later) == []
    with pytest.raises(AlreadyDecided):
        deciding.decide(gate.id, Decision("approve", "alice", "tab"))
    gate.refresh_from_db()
    assert (gate.status, gate.decided_by, gate.decided_via) == ("expired", "deadline", "deadline")
    assert no_enqueue == [run_id, run_id]
    execute_run(run_id)
    tail = [(e.kind, e.data) for e in read_events(s.id, 0)][-4:]
    assert tail[0] == (
        "approval.decided",
        {"approval_id": gate.id, "decision": "expired", "decided_by": "deadline"},
    )
    assert tail[1][1]["output"].startswith("expired: ") and tail[1][1]["ok"] is False
    assert tail[2][1]["text"] == "1. The write to d.txt expired: nobody decided in time."


@pytest.mark.parametrize("seconds", [0, 5])
def test_no_deadline_unless_asked_and_a_tools_own_wins(user, no_enqueue, settings, seconds):
    """Off by default; AGENT_GATE_DEADLINES names a tool's own (0: none)."""
    settings.AGENT_GATE_DEADLINES = {"write_file": seconds}
    _, _, (gate,) = _parked_with_deadline(user, settings, 1000)
    if seconds:
        left = (gate.expires_at - gate.created_at).total_seconds()
        assert 4.5 < left <= 5.5
    else:
        assert gate.expires_at is None


def test_a_deadline_racing_a_decision_leaves_exactly_one_standing(user, no_enqueue, settings):
    """20 rounds: a person's decision and the deadline's, at the same moment
    on two threads; exactly one approval.decided a gate, and the gate says it."""
    from sessions_app.runtime.executor import execute_run
    from sessions_app.runtime.sweeper import expire_due_gates
    from sessions_app.wire.errors import AlreadyDecided

    settings.AGENT_GATE_DEADLINE_SECONDS = 60
    settings.AGENT_USER_MAX_RUNS = 0  # the approved ones stay running here
    for i in range(20):
        s = create_session(user)
        run_id = turns.submit_message(s.id, f"r{i}", "/write r.txt x").run_id
        execute_run(run_id)
        gate = ApprovalRequest.objects.get(run_id=run_id)
        # Due for this test's sweep only: another process's sees it pending.
        later = timezone.now() + timedelta(minutes=2)
        start = threading.Barrier(2)
        won: list[str] = []

        def person(gate_id=gate.id, start=start, won=won):
            start.wait()
            try:
                deciding.decide(gate_id, Decision("approve", "alice", "tab"))
                won.append("person")
            except AlreadyDecided:
                pass

        def deadline(start=start, won=won, later=later):
            start.wait()
            if expire_due_gates(now=later):
                won.append("deadline")

        threads = [threading.Thread(target=person), threading.Thread(target=deadline)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        decided = [e.data for e in read_events(s.id, 0) if e.kind == "approval.decided"]
        assert len(won) == 1 and len(decided) == 1, (i, won, decided)
        gate.refresh_from_db()
        assert gate.status == ("approved" if won == ["person"] else "expired")
