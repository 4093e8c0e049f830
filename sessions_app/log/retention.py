"""Retention and epoch rotation: the operations that change a session's log
after the fact, and tell the tabs that follow it.

- ``apply_retention``: the settings' policy (``AGENT_RETAIN_DELTAS_DAYS``,
  ``AGENT_RETAIN_SESSIONS_DAYS``). Superseded deltas go (``compaction``); the
  transcript stays. Whole sessions go only when idle that long, their
  workspaces with them (``apps._remove_workspace``). Closed sockets'
  diagnostic rows go after ``AGENT_RETAIN_CONNECTIONS_DAYS``.
- ``rotate_epoch``: a new epoch for a session (after a restore or a rebuilt
  log). Its open sockets are closed with 1013; their tabs resume with the old
  epoch, are told ``epoch_mismatch``, drop their cache and reload from 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, Q
from django.utils import timezone

from sessions_app import fanout
from sessions_app.log.compaction import purge_superseded
from sessions_app.models import AgentSession, Connection, Run, new_epoch

log = logging.getLogger(__name__)


@dataclass
class RetentionReport:
    deltas_deleted: int = 0
    sessions_compacted: int = 0
    sessions_deleted: int = 0
    connections_deleted: int = 0


def apply_retention(
    now=None, *, deltas_days=None, sessions_days=None, connections_days=None
) -> RetentionReport:
    """Apply the retention policy (the settings unless given); 0 or None: keep."""
    now = now or timezone.now()
    deltas_days = settings.AGENT_RETAIN_DELTAS_DAYS if deltas_days is None else deltas_days
    sessions_days = settings.AGENT_RETAIN_SESSIONS_DAYS if sessions_days is None else sessions_days
    if connections_days is None:
        connections_days = settings.AGENT_RETAIN_CONNECTIONS_DAYS
    report = RetentionReport()
    if connections_days:
        # Diagnostic rows of closed sockets: one per socket ever opened.
        cutoff = now - timedelta(days=connections_days)
        report.connections_deleted, _ = Connection.objects.filter(closed_at__lt=cutoff).delete()
    if sessions_days:
        cutoff = now - timedelta(days=sessions_days)
        active = Run.objects.filter(status__in=Run.ACTIVE).values("session_id")
        stale = AgentSession.objects.filter(updated_at__lt=cutoff).exclude(id__in=active)
        for session_id in stale.values_list("id", flat=True):
            with transaction.atomic():
                # Locked and checked again: a message sent meanwhile keeps it.
                session = (
                    AgentSession.objects.select_for_update()
                    .filter(id=session_id, updated_at__lt=cutoff)
                    .first()
                )
                if (
                    session is None
                    or Run.objects.filter(session_id=session_id, status__in=Run.ACTIVE).exists()
                ):
                    continue
                session.delete()
                report.sessions_deleted += 1
    if deltas_days:
        cutoff = now - timedelta(days=deltas_days)
        # Sessions with a run that finished before the cutoff and after the
        # last purge could have something to purge.
        # Sessions with a run that finished before the cutoff and after the
        # session's last pass; the scan starts at the first such run's input
        # (a run queued behind another may finish after it, its input earlier).
        candidates = (
            Run.objects.filter(status=Run.Status.FINISHED, finished_at__lt=cutoff)
            .filter(
                Q(session__compacted_before__isnull=True)
                | Q(finished_at__gte=F("session__compacted_before"))
            )
            .values("session_id")
            .annotate(first=Min("message_seq"))
        )
        for row in candidates:
            deleted = purge_superseded(row["session_id"], cutoff, after=row["first"] - 1)
            AgentSession.objects.filter(id=row["session_id"]).filter(
                Q(compacted_before__isnull=True) | Q(compacted_before__lt=cutoff)
            ).update(compacted_before=cutoff)
            if deleted:
                report.deltas_deleted += deleted
                report.sessions_compacted += 1
    if report.deltas_deleted or report.sessions_deleted or report.connections_deleted:
        log.info("retention: %s", report)
    return report


def rotate_epoch(session_id: str) -> str | None:
    """Give the session a new epoch and close its sockets (1013, retryable);
    returns the new epoch, or None if there is no such session."""
    epoch = new_epoch()
    with transaction.atomic():
        changed = AgentSession.objects.filter(id=session_id).update(epoch=epoch)
        if not changed:
            return None
        transaction.on_commit(lambda: fanout.publish_rotation(session_id, epoch), robust=True)
    log.info("session %s: epoch rotated", session_id)
    return epoch
