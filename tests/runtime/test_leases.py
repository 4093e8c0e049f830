"""Leases: claimed once, renewed by one keeper per process, lost when taken away."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.log.sessions import create_session
from sessions_app.models import Run
from sessions_app.runtime import leases, runs, turns

pytestmark = pytest.mark.django_db(transaction=True)


def _running(user, n):
    ids = []
    for i in range(n):
        session = create_session(user)
        ids.append(turns.submit_message(session.id, f"m{i}", "/stream 1 0").run_id)
    return ids


def test_claim_is_a_compare_and_set(user, no_enqueue):
    """Two claims of one run: the first wins, the second gets False."""
    (run_id,) = _running(user, 1)
    assert leases.claim(run_id, "w1") is True
    assert leases.claim(run_id, "w2") is False
    run = Run.objects.get(id=run_id)
    assert run.worker == "w1" and run.lease_expires_at > timezone.now()


def test_keeper_renews_every_held_lease_and_flags_lost_ones(user, no_enqueue, settings, no_sweeper):
    """One beat renews all of a process's runs; a run cancelled or taken over is
    flagged lost, the others are not."""
    settings.AGENT_USER_MAX_RUNS = 0
    ids = _running(user, 4)
    for run_id in ids:
        assert leases.claim(run_id, "me")
    past = timezone.now() - timedelta(seconds=1)
    Run.objects.filter(id__in=ids).update(lease_expires_at=past)
    Run.objects.filter(id=ids[1]).update(worker="someone-else")
    runs.cancel(ids[2], "alice")
    keeper = leases.LeaseKeeper("me")
    lost = {run_id: threading.Event() for run_id in ids}
    for run_id, event in lost.items():
        keeper.hold(run_id, event)
    keeper.beat()
    assert [lost[r].is_set() for r in ids] == [False, True, True, False]
    for run_id in (ids[0], ids[3]):
        assert Run.objects.get(id=run_id).lease_expires_at > timezone.now()
    keeper.release(ids[0])
    Run.objects.filter(id=ids[0]).update(worker="")
    keeper.beat()
    assert not lost[ids[0]].is_set()
