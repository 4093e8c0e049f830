"""A run's life: one table of moves, and the one function that makes them.

A run is ``queued``, ``running``, ``awaiting_approval`` or ``finished``
(``Run.status``). While running it is either handed over (no ``worker``; its
``lease_expires_at`` the pickup deadline: the task framework's executor has
that long to claim it) or held (its ``worker``, until ``lease_expires_at``).
``MOVES`` says, for each event, which statuses it leaves, whether the run
must be held or handed over, the status it enters and the lease it has
then; ``transition`` is the only code that writes a run's status, worker
or lease: a compare-and-set, in the caller's transaction, on the rows the
caller names (``tests/runtime/test_lifecycle.py`` reads every module of the
app for any other write); a new run's first status and lease are ``born``'s.

=========  ==============================  ==================  =======================
event      from                            to                  worker, lease
=========  ==============================  ==================  =======================
admit      queued                          running             none, pickup deadline
claim      running, handed over            running             the claimer, one lease
                                                               (a new generation)
renew      running, held                   running             kept, one lease more
release    running, held                   running             none, pickup deadline
repick     running, handed over            running             none, a new deadline
park       running, held                   awaiting_approval   none, none
continue   awaiting_approval               running             none, pickup deadline
finish     queued, running, awaiting       finished            none, none
=========  ==============================  ==================  =======================

A run is born ``queued`` (its session busy, or its user at their limit) or
handed over at once (``born``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import DateTimeField, ExpressionWrapper, F, QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from sessions_app.models import Run

Status = Run.Status

ADMIT = "admit"
CLAIM = "claim"
RENEW = "renew"
RELEASE = "release"
REPICK = "repick"
PARK = "park"
CONTINUE = "continue"
FINISH = "finish"


def expires_in(seconds: float | None = None):
    """``now + seconds`` (default: one lease) on the database's clock."""
    if seconds is None:
        seconds = settings.AGENT_LEASE_SECONDS
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


def pickup_deadline():
    """Until when a run handed to the task framework may wait for an executor;
    past it the sweeper hands it over again (a lost task must not strand it).
    An expression on the database's clock, like every lease time."""
    return expires_in(settings.AGENT_PICKUP_SECONDS)


@dataclass(frozen=True)
class Move:
    """One row of the table: the statuses it leaves, ``held`` (True: a
    worker holds it; False: none does; None: either), the status it enters,
    and what it writes of the worker and the lease."""

    sources: tuple[str, ...]
    held: bool | None
    target: str
    lease: Callable[[], dict[str, Any]]


def _handed_over() -> dict[str, Any]:
    return {"worker": "", "lease_expires_at": pickup_deadline()}


def _let_go() -> dict[str, Any]:
    return {"worker": "", "lease_expires_at": None}


MOVES: dict[str, Move] = {
    ADMIT: Move((Status.QUEUED,), None, Status.RUNNING, _handed_over),
    CLAIM: Move(
        (Status.RUNNING,),
        False,
        Status.RUNNING,
        lambda: {"lease_expires_at": expires_in(), "lease_generation": F("lease_generation") + 1},
    ),
    RENEW: Move(
        (Status.RUNNING,), True, Status.RUNNING, lambda: {"lease_expires_at": expires_in()}
    ),
    RELEASE: Move((Status.RUNNING,), True, Status.RUNNING, _handed_over),
    REPICK: Move(
        (Status.RUNNING,), False, Status.RUNNING, lambda: {"lease_expires_at": pickup_deadline()}
    ),
    PARK: Move((Status.RUNNING,), True, Status.AWAITING_APPROVAL, _let_go),
    CONTINUE: Move((Status.AWAITING_APPROVAL,), None, Status.RUNNING, _handed_over),
    FINISH: Move(
        (Status.QUEUED, Status.RUNNING, Status.AWAITING_APPROVAL), None, Status.FINISHED, _let_go
    ),
}


def can_move(status: str, event: str) -> bool:
    """May a run at ``status`` take ``event``?"""
    return status in MOVES[event].sources


def transition(runs: QuerySet[Run], event: str, **fields: Any) -> int:
    """Move the runs of ``runs`` still where ``event`` leaves from (a
    compare-and-set: the rows another writer moved first are left alone),
    writing the status, worker and lease the table says, and ``fields``
    (a checkpoint's ``state``, a finish's ``stop_reason``, a claim's
    ``worker``…); how many moved."""
    move = MOVES[event]
    if set(fields) & {"status", "lease_expires_at", "lease_generation"}:
        raise ValueError("the table writes the status and the lease")
    if ("worker" in fields) != (event == CLAIM) or fields.get("worker") == "":
        raise ValueError("a claim, and only a claim, names its worker")
    moving = runs.filter(status__in=move.sources)
    if move.held is True:
        moving = moving.exclude(worker="")
    elif move.held is False:
        moving = moving.filter(worker="")
    return moving.update(status=move.target, **move.lease(), **fields)


def born(queued: bool) -> dict[str, Any]:
    """A new run's status and lease: queued, or handed over at once."""
    if queued:
        return {"status": Status.QUEUED, "started_at": None, "lease_expires_at": None}
    return {"status": Status.RUNNING, "started_at": timezone.now(), **_handed_over()}
