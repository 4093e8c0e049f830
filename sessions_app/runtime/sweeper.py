"""Crash recovery: no run stays with a process that is gone.

A running run is held by a worker whose lease the worker keeps renewing. The
``Sweeper`` (a thread in every run-executing process) takes over runs whose
lease expired: each goes back to the queue at its last checkpoint
(``durable.release``), and another worker goes on with it. Parked gates hold
no lease: they wait for their decision however many restarts happen, or, with
a deadline, until the sweeper decides them ``expired`` (``expire_due_gates``).
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models.functions import Now
from django.utils import timezone

from sessions_app.fanout.presence import close_stale_connections
from sessions_app.log.retention import apply_retention
from sessions_app.models import ApprovalRequest, Connection, Run
from sessions_app.runtime import deciding, durable, gates, lifecycle, notify, runs
from sessions_app.runtime.gates import Decision
from sessions_app.server.identity import worker_id
from sessions_app.server.logs import Outage
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import AlreadyDecided, ApprovalCancelled, NotFound

log = logging.getLogger(__name__)
_outage = Outage(log)


def take_over_expired() -> list[str]:
    """Take over every run whose worker stopped renewing its lease: back to
    the queue at its last checkpoint (or ``error``, its crash budget spent)."""
    expired = list(
        Run.objects.filter(status=Run.Status.RUNNING, lease_expires_at__lt=Now())
        .exclude(worker="")
        .values_list("id", "worker")
    )
    done = []
    for run_id, worker in expired:
        if durable.release(run_id, worker, p.RESUMED_TAKEOVER, lease_expired=True):
            done.append(run_id)
    return done


# Gates one pass expires at most (the next pass takes the rest).
EXPIRE_BATCH = 200


def expire_due_gates(now=None) -> list[str]:
    """Decide ``expired`` every pending gate whose deadline passed by ``now``
    (the database's clock by default; oldest first, ``EXPIRE_BATCH`` a pass),
    as any decision: once, against a person's racing it (the first stands),
    its run going on when its step is decided. A deadline is a row, so one
    that passed while every process was down is decided by the first pass
    after. Returns the gates it decided."""
    due = (
        ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING, expires_at__lte=now or Now()
        )
        .order_by("expires_at")
        .values_list("id", flat=True)[:EXPIRE_BATCH]
    )
    decided = []
    expire = Decision(p.GATE_EXPIRED, gates.DEADLINE, gates.VIA_DEADLINE)
    for approval_id in list(due):
        try:
            deciding.decide(approval_id, expire)
        except (AlreadyDecided, ApprovalCancelled, NotFound):
            continue  # a person (or its run's end) came first
        decided.append(approval_id)
    if decided:
        log.info("%d gates expired (%s …)", len(decided), ", ".join(decided[:3]))
    return decided


def requeue_unclaimed() -> list[str]:
    """Hand over again runs no executor picked up in time (their task was
    lost: a worker died between taking the task and claiming the run). The
    claim is a compare-and-set, so a late original delivery is harmless."""
    stale = Run.objects.filter(status=Run.Status.RUNNING, worker="", lease_expires_at__lt=Now())
    again = []
    for run_id in stale.values_list("id", flat=True):
        with transaction.atomic():
            if lifecycle.transition(Run.objects.filter(id=run_id), lifecycle.REPICK):
                runs.enqueue(run_id)
                again.append(run_id)
    if again:
        log.warning("re-enqueued runs nobody picked up: %s", again)
    return again


def recover_at_startup() -> None:
    """Embedded profile: this process is the only executor, so whatever a
    previous process was still executing when it died is taken over (its
    lease need not lapse), and runs that were waiting for an executor
    (started, handed back at a graceful stop, or continued after a decision)
    are enqueued."""
    # Not this process's own: a request may already have started a run here.
    held = Run.objects.filter(status=Run.Status.RUNNING).exclude(worker__in=("", worker_id()))
    for run_id, worker in list(held.values_list("id", "worker")):
        durable.release(run_id, worker, p.RESUMED_TAKEOVER, enqueue=False)
    for run_id in Run.objects.filter(status=Run.Status.RUNNING, worker="").values_list(
        "id", flat=True
    ):
        runs.enqueue(run_id)
    # Sockets of the previous process are gone; their rows must not count as viewers.
    Connection.objects.filter(closed_at__isnull=True).update(closed_at=timezone.now(), clean=False)
    close_old_connections()


class Sweeper(threading.Thread):
    """Periodically takes over runs whose lease expired (and, when configured,
    applies the retention policy every ``AGENT_RETENTION_INTERVAL_SECONDS``)."""

    def __init__(self, interval: float | None = None):
        super().__init__(name="run-sweeper", daemon=True)
        self.interval = interval or settings.AGENT_SWEEP_SECONDS
        self.stopped = threading.Event()

    def run(self) -> None:
        retention_due = 0.0
        while not self.stopped.wait(self.interval):
            try:
                take_over_expired()
                expire_due_gates()
                requeue_unclaimed()
                runs.admit_all_waiting()
                close_stale_connections()
                if retention_configured() and time.monotonic() >= retention_due:
                    retention_due = time.monotonic() + settings.AGENT_RETENTION_INTERVAL_SECONDS
                    apply_retention()
            except Exception as exc:
                _outage.failed("sweep", exc)
            try:  # apart: a notice failing holds no run back
                notify.notify_waiting_gates()
            except Exception as exc:
                _outage.failed("notices", exc)
            finally:
                close_old_connections()


def retention_configured() -> bool:
    return bool(settings.AGENT_RETAIN_DELTAS_DAYS or settings.AGENT_RETAIN_SESSIONS_DAYS)
