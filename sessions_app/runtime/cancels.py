"""A cancel that waits for the approved tool its run is executing.

A run whose approved tool is running is not finished under it: the cancel is
recorded on the run (``Run.state["cancel"]``) and carried out right after the
tool's ``tool.result`` (``runtime.toolcalls``), so the log always says what
the tool did before it says the run ended. A turn sent with the cancel (stop
and send, an edit, a regenerate) is queued meanwhile, named as the one to
start next (``start_after_cancel``); a newer stop and send replaces it
(``waiting_after_cancel``). Callers hold the session's lock.
"""

from __future__ import annotations

import logging

from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime import gates as gate_model

log = logging.getLogger(__name__)


def defer_for_tool_in_flight(run_id: str, by: str, message: str, gates: str) -> bool:
    """Record the cancel on a run whose approved tool started and has no
    result yet (its gate still in the state); True if it must wait."""
    found = Run.objects.filter(id=run_id, status=Run.Status.RUNNING).values_list("state").first()
    state = dict((found[0] if found else None) or {})
    gate = gate_model.current_call(state)
    if (
        not gate
        or not ApprovalRequest.objects.filter(
            tool_call_id=gate, status=ApprovalRequest.Status.APPROVED, executed_at__isnull=False
        ).exists()
    ):
        return False
    state["cancel"] = {"by": by, "message": message, "gates": gates}
    Run.objects.filter(id=run_id).update(state=state)
    log.info("run %s: the cancel waits for its tool in flight", run_id, extra={"run_id": run_id})
    return True


def waiting_after_cancel(run_id: str) -> Run | None:
    """The queued run a waiting cancel of ``run_id`` will start first, if any."""
    state = Run.objects.values_list("state", flat=True).get(id=run_id) or {}
    nxt = (state.get("cancel") or {}).get("next")
    return Run.objects.filter(id=nxt, status=Run.Status.QUEUED).first() if nxt else None


def start_after_cancel(run_id: str, next_run_id: str) -> None:
    """``run_id``'s cancel waits for its tool: once it is carried out, start
    ``next_run_id`` first (caller holds the session lock)."""
    state = Run.objects.values_list("state", flat=True).get(id=run_id) or {}
    if state.get("cancel"):
        state["cancel"]["next"] = next_run_id
        Run.objects.filter(id=run_id).update(state=state)
