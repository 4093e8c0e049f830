"""Run leases: who executes a run, and until when that claim holds.

A running run is held by one process (``Run.worker``) until
``Run.lease_expires_at``. The holder renews the lease while it works; when the
lease lapses the sweeper takes the run over (``runtime.durable``). Every time in here
is the database's clock (``Now()``), never a process's own, so hosts whose
clocks drift apart cannot take each other's live runs.

One ``LeaseKeeper`` thread per process renews the leases of every run the
process executes, in one statement per beat, however many runs that is: a
worker with 32 concurrent runs holds one connection for its leases, not 32.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from django.conf import settings
from django.db import close_old_connections

from sessions_app.models import Run
from sessions_app.runtime import lifecycle
from sessions_app.server.identity import worker_id
from sessions_app.server.logs import Outage

log = logging.getLogger(__name__)
_outage = Outage(log)


def claim(run_id: str, worker: str) -> bool:
    """Take a running run that no worker holds (a new lease generation: the
    fencing token of this holder). False if someone else has it."""
    claimed = lifecycle.transition(Run.objects.filter(id=run_id), lifecycle.CLAIM, worker=worker)
    return bool(claimed)


def holds(run_id: str, worker: str, generation: int) -> bool:
    """Does ``worker`` still hold the running run with the lease generation
    it claimed (with its task: ``Picked``)? A later claim, even by another
    thread of the same process, is not this one."""
    return Run.objects.filter(
        id=run_id, status=Run.Status.RUNNING, worker=worker, lease_generation=generation
    ).exists()


class Picked:
    """A run claimed by a worker in the transaction that took its task, so
    that no moment passes in which a task is taken and its run held by
    nobody: a worker that dies right after the pickup leaves a lease that
    lapses (``AGENT_LEASE_SECONDS``), and the sweeper of another takes the
    run over, as it would mid-step. Its lease is renewed by the keeper from
    the pickup until its drive takes it over (``held``) or the task ends
    (``done``)."""

    def __init__(self, run_id: str, worker: str, generation: int) -> None:
        self.run_id, self.worker, self.generation = run_id, worker, generation
        self.lost = threading.Event()

    @classmethod
    def claim(cls, run_id: str, worker: str) -> Picked | None:
        """Claim the run for its task (inside the task's transaction: the
        generation read is this claim's); None when it is not there to run
        (finished, cancelled, or someone's)."""
        if not claim(run_id, worker):
            return None
        generation = (
            Run.objects.filter(id=run_id, worker=worker)
            .values_list("lease_generation", flat=True)
            .first()
        )
        return None if generation is None else cls(run_id, worker, generation)

    def hold(self) -> None:
        """After the pickup commits: the keeper renews its lease from now."""
        keeper().hold(self.run_id, self.lost)

    def done(self) -> None:
        """The task ended: forget the pickup's lease (a drive that took the
        run over renews it under its own entry)."""
        keeper().release(self.run_id, self.lost)


def renew(run_ids: Iterable[str], worker: str) -> set[str]:
    """Extend the leases ``worker`` still holds among ``run_ids``; returns those.

    A run missing from the result was cancelled, finished, parked or taken
    over: its executor must stop appending.
    """
    ids = list(run_ids)
    if not ids:
        return set()
    held = Run.objects.filter(id__in=ids, status=Run.Status.RUNNING, worker=worker)
    # No row locks (they would add a lock order to keep): renew what is held,
    # then read what is still held. A run lost between the two is reported
    # lost; one lost before the update is not renewed and reported lost.
    lifecycle.transition(held, lifecycle.RENEW)
    return set(held.values_list("id", flat=True))


class LeaseKeeper(threading.Thread):
    """Renews the leases of every run this process executes, one beat at a time.

    ``hold`` registers a run with the event to set when its lease is lost;
    ``release`` forgets it. Started on first use, stopped with ``stop``.
    """

    def __init__(self, worker: str):
        super().__init__(name="lease-keeper", daemon=True)
        self.worker = worker
        self._held: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.stopped = threading.Event()

    def hold(self, run_id: str, lost: threading.Event) -> None:
        with self._lock:
            self._held[run_id] = lost

    def release(self, run_id: str, lost: threading.Event | None = None) -> None:
        """Forget ``run_id`` (only if it is still held with ``lost``, when given)."""
        with self._lock:
            if lost is None or self._held.get(run_id) is lost:
                self._held.pop(run_id, None)

    def stop(self) -> None:
        self.stopped.set()

    def beat(self) -> None:
        """Renew every held lease once; flag the runs whose lease is gone."""
        with self._lock:
            held = dict(self._held)
        if not held:
            return
        kept = renew(held, self.worker)
        for run_id, lost in held.items():
            if run_id not in kept:
                lost.set()

    def run(self) -> None:
        interval = max(settings.AGENT_LEASE_SECONDS / 3, 0.2)
        try:
            while not self.stopped.wait(interval):
                try:
                    self.beat()
                except Exception as exc:
                    # A locked or dropped database: try again next beat (the
                    # lease is three beats long) rather than stop renewing.
                    _outage.failed("lease renewal", exc)
                    close_old_connections()
        finally:
            close_old_connections()


_keeper: LeaseKeeper | None = None
_keeper_lock = threading.Lock()


def keeper() -> LeaseKeeper:
    """This process's lease keeper, started on first use."""
    global _keeper

    with _keeper_lock:
        if _keeper is None or not _keeper.is_alive():
            _keeper = LeaseKeeper(worker_id())
            _keeper.start()
        return _keeper
