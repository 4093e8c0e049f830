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
    is final; a claim and a repick need no holder, a renewal and a park one."""
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
        "release": True,
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
    assert _moved(queued, "release")[0] == 0  # handed over already: nothing to let go
    assert _moved(queued, "renew")[0] == 0  # nobody holds it
    count, run = _moved(queued, "repick")
    assert (count, run.worker) == (1, "")
    _moved(queued, "claim", worker="w3")
    before = Run.objects.get(id=queued.id).lease_expires_at
    count, run = _moved(queued, "renew")
    assert (count, run.worker) == (1, "w3") and run.lease_expires_at >= before
    assert _moved(queued, "repick")[0] == 0  # held: not a lost pickup
    count, run = _moved(queued, "release", state={"keep": 3})
    assert (count, run.status, run.worker, run.state) == (1, "running", "", {"keep": 3})


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


WRITES = {"update", "create", "get_or_create", "update_or_create", "bulk_update"}
LEASE = {"worker", "lease_expires_at", "lease_generation"}  # no other model has them


class _Writers(ast.NodeVisitor):
    """The places in one module that write a run's status, worker or lease:
    a write call's keywords (a status when it is a run's: ``Run.Status.…``,
    or an alias of it such as lifecycle's own ``Status``), a ``**`` spread
    into one (the fields unseen), and an assignment to such an attribute."""

    def __init__(self, source: str) -> None:
        self.found: list[tuple[int, str]] = []
        tree = ast.parse(source)
        self.aliases = {"Run.Status"} | {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and ast.unparse(node.value) == "Run.Status"
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        self.visit(tree)

    def _runs_status(self, value: ast.expr) -> bool:
        text = ast.unparse(value)
        return any(text == alias or text.startswith(alias + ".") for alias in self.aliases)

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802 (ast's name)
        if isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            for kw in node.keywords:
                if kw.arg in LEASE or (kw.arg == "status" and self._runs_status(kw.value)):
                    self.found.append((node.lineno, kw.arg))
                elif (
                    kw.arg is None
                    and ast.unparse(node.func.value).startswith("Run.")
                    and not ast.unparse(kw.value).startswith("lifecycle.born(")
                ):
                    self.found.append((node.lineno, "**"))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:  # noqa: N802
        for target in node.targets:
            # A run's attribute (``run.worker = …``), not another object's.
            if not isinstance(target, ast.Attribute) or "run" not in ast.unparse(target.value):
                continue
            if target.attr in LEASE or (target.attr == "status" and self._runs_status(node.value)):
                self.found.append((node.lineno, target.attr))
        self.generic_visit(node)


def test_the_reader_finds_each_way_to_write_a_run():
    """The check below is only as good as its reader: every way of writing
    is found, another model's status is not."""
    source = """
Status = Run.Status
held.update(status=Status.RUNNING)
held.update(status=Run.Status.RUNNING, lease_expires_at=None)
Run.objects.filter(id=x).update(worker="")
Run.objects.create(**fields)
run.worker = "w1"
run.status = Run.Status.FINISHED
Run.objects.create(**lifecycle.born(queued=True))
ApprovalRequest.objects.filter(run__status=Run.Status.RUNNING).update(status=Gate.APPROVED)
session.status = AgentSession.Status.IDLE
self.worker = worker
"""
    assert _Writers(source).found == [
        (3, "status"),
        (4, "status"),
        (4, "lease_expires_at"),
        (5, "worker"),
        (6, "**"),
        (7, "worker"),
        (8, "status"),
    ]


def test_no_other_module_writes_a_runs_status_worker_or_lease():
    """Every write of a run's status, worker or lease is lifecycle's (the
    migrations aside: they are history). A run's first status is
    ``lifecycle.born``'s, spread into its creation."""
    writers = []
    for path in sorted((ROOT / "sessions_app").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if "/migrations/" in relative or relative.endswith("runtime/lifecycle.py"):
            continue
        writers += [(relative, *place) for place in _Writers(path.read_text()).found]
    assert writers == []
