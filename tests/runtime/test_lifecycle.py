"""A run's life (runtime/lifecycle.py): one table of moves, one function
that makes them (a compare-and-set), and no other module writing a run's
status, worker or lease."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sessions_app.log.sessions import create_session
from sessions_app.models import Run
from sessions_app.runtime import lifecycle
from sessions_app.runtime.lifecycle import MOVES

Status = Run.Status
ROOT = Path(__file__).resolve().parents[2]


def test_the_table_names_every_move_and_a_finished_run_never_moves():
    """Each event leaves from active statuses only, and enters one; finished
    is final; only a claim, a renewal and a park need a holder or its absence."""
    assert set(MOVES) == {
        "admit",
        "claim",
        "renew",
        "release",
        "repick",
        "park",
        "continue",
        "finish",
    }
    for event, move in MOVES.items():
        assert Status.FINISHED not in move.sources, event
        assert not lifecycle.can_move(Status.FINISHED, event)
    assert MOVES["finish"].sources == (Status.QUEUED, Status.RUNNING, Status.AWAITING_APPROVAL)
    assert {e: m.held for e, m in MOVES.items() if m.held is not None} == {
        "claim": False,
        "renew": True,
        "repick": False,
        "park": True,
    }
    assert lifecycle.can_move(Status.AWAITING_APPROVAL, "continue")
    assert not lifecycle.can_move(Status.QUEUED, "park")


def _run(user, status: str, worker: str = "") -> Run:
    session = create_session(user, "t")
    return Run.objects.create(
        session=session,
        client_message_id=f"m-{status}-{worker}",
        text="x",
        message_seq=1,
        status=status,
        worker=worker,
    )


def _moved(run: Run, event: str, **fields) -> tuple[int, Run]:
    count = lifecycle.transition(Run.objects.filter(id=run.id), event, **fields)
    return count, Run.objects.get(id=run.id)


@pytest.mark.django_db
def test_each_move_is_a_compare_and_set_that_writes_the_lease(user):
    """A claim takes a handed-over run (a new lease generation) and never a
    held one; a park needs a holder and lets it go; a continue and an admit
    hand the run over with a pickup deadline; a finish lets go of it; a
    move from where the run is not moves nothing."""
    handed = _run(user, Status.RUNNING)
    count, run = _moved(handed, "claim", worker="w1")
    assert (count, run.worker, run.lease_generation) == (1, "w1", 1)
    assert run.lease_expires_at is not None
    assert _moved(handed, "claim", worker="w2")[0] == 0  # held: never taken twice
    count, run = _moved(handed, "park", state={"gate": "c1"})
    assert (count, run.status, run.worker, run.lease_expires_at) == (
        1,
        "awaiting_approval",
        "",
        None,
    )
    assert run.state == {"gate": "c1"}
    assert _moved(handed, "park")[0] == 0
    count, run = _moved(handed, "continue")
    assert (count, run.status, run.worker) == (1, "running", "")
    assert run.lease_expires_at is not None  # the pickup deadline
    count, run = _moved(handed, "finish", stop_reason="end_turn")
    assert (count, run.status, run.stop_reason, run.lease_expires_at) == (
        1,
        "finished",
        "end_turn",
        None,
    )
    assert _moved(handed, "admit")[0] == 0
    queued = _run(user, Status.QUEUED)
    count, run = _moved(queued, "admit")
    assert (count, run.status, run.worker) == (1, "running", "")


def test_the_table_alone_writes_the_status_and_the_lease():
    """Fields the table owns are refused from a caller, and a claim names
    its worker (no other move does)."""
    runs = Run.objects.none()
    with pytest.raises(ValueError, match="the table writes"):
        lifecycle.transition(runs, "park", status="running")
    with pytest.raises(ValueError, match="the table writes"):
        lifecycle.transition(runs, "renew", lease_expires_at=None)
    with pytest.raises(ValueError, match="a claim, and only a claim"):
        lifecycle.transition(runs, "claim")
    with pytest.raises(ValueError, match="a claim, and only a claim"):
        lifecycle.transition(runs, "park", worker="w1")


OWNED = {"status", "worker", "lease_expires_at", "lease_generation"}
WRITES = {"update", "create", "get_or_create", "update_or_create", "bulk_update"}


def _writes_a_run(node: ast.Call) -> set[str]:
    """The fields the table owns that a write call sets (a status only when
    it is a run's: ``Run.Status.…``)."""
    if not (isinstance(node.func, ast.Attribute) and node.func.attr in WRITES):
        return set()
    target = ast.unparse(node.func.value)

    def owned(kw: ast.keyword) -> bool:
        if kw.arg in ("lease_expires_at", "lease_generation"):
            return True
        if kw.arg in ("status", "worker") and "Run" in target:
            return True
        return kw.arg == "status" and ast.unparse(kw.value).startswith("Run.Status")

    return {kw.arg for kw in node.keywords if owned(kw)}


def test_no_other_module_writes_a_runs_status_worker_or_lease():
    """Every write of a run's status, worker or lease is lifecycle's (the
    migrations aside: they are history)."""
    writers = []
    for path in sorted((ROOT / "sessions_app").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if "/migrations/" in relative or relative.endswith("runtime/lifecycle.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (fields := _writes_a_run(node)):
                writers.append((relative, node.lineno, sorted(fields)))
    assert writers == []
