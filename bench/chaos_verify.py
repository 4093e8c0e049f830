"""What the chaos suite checks at the end of its cuts: the report it prints,
and the invariants every tab and every session must hold (see ``chaos.py``)."""

from __future__ import annotations

import asyncio
import collections
import time

from django.db import close_old_connections

from sessions_app.log.events import read_events
from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.runtime.tools import workspace_for


class Report:
    """Invariants checked and figures measured, printed as they come."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def fail(self, what: str) -> None:
        self.failures.append(what)
        print(f"  FAIL {what}", flush=True)

    def check(self, ok: bool, what: str) -> None:
        if ok:
            print(f"  ok   {what}", flush=True)
        else:
            self.fail(what)

    def figure(self, what: str) -> None:
        print(f"  --   {what}", flush=True)

    def summary(self) -> int:
        if self.failures:
            print(f"\nchaos: {len(self.failures)} invariant(s) FAILED", flush=True)
            return 1
        print("\nchaos: every invariant held", flush=True)
        return 0


def _db(fn, *args):
    def call():
        close_old_connections()
        try:
            return fn(*args)
        finally:
            close_old_connections()

    return asyncio.to_thread(call)


def _quiet(session_ids) -> bool:
    return not Run.objects.filter(session_id__in=session_ids, status__in=Run.ACTIVE).exists()


def head_of(session_id: str) -> int:
    """The session's last logged seq (0: none)."""
    return max((e.seq for e in read_events(session_id, 0)), default=0)


def stop_reasons(session_ids) -> list[str]:
    """Every answer's stop reason in these sessions, in log order."""
    return [
        e.data.get("stop_reason", "?")
        for sid in session_ids
        for e in read_events(sid, 0)
        if e.kind == "run.finished"
    ]


async def wait_quiet(session_ids, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await _db(_quiet, session_ids):
            return True
        await asyncio.sleep(0.2)  # a database state no frame announces
    return False


# --- verification ----------------------------------------------------------------------


def _input(event) -> bool:
    """Does ``event`` log an input (a message, an edit, or a regenerate's run)?"""
    if event.kind == "user.message":
        return True
    return event.kind in ("run.started", "run.queued") and "regenerates" in event.data


def _server_truth(session_id: str):
    events = list(read_events(session_id, 0))
    approvals = list(ApprovalRequest.objects.filter(session_id=session_id))
    head = AgentSession.objects.get(id=session_id).head
    active = Run.objects.filter(session_id=session_id, status__in=Run.ACTIVE).count()
    interrupted = Run.objects.filter(session_id=session_id, stop_reason="interrupted").count()
    return events, approvals, head, active, interrupted


async def verify(tabs, sessions, report: Report, elapsed: float) -> None:
    ids = [s.id for s in sessions]
    report.check(await wait_quiet(ids), "every run of the cut sessions finished")
    truths = {sid: await _db(_server_truth, sid) for sid in ids}
    for tab in tabs:
        try:
            await tab.catch_up(truths[tab.session_id][2])
        except Exception as exc:  # reported, not raised: the other checks still run
            report.fail(f"{tab.name}: catching up to head failed: {exc!r}")
    violations = [v for t in tabs for v in t.violations]
    cuts = sum((t.cuts for t in tabs), collections.Counter())
    closes = sum((t.closes for t in tabs), collections.Counter())
    report.figure(
        f"{len(tabs)} raw tabs over {len(sessions)} sessions, {elapsed:.1f} s: "
        f"{sum(t.connections for t in tabs):,} connections, {sum(cuts.values()):,} cuts "
        f"({', '.join(f'{k} {v}' for k, v in sorted(cuts.items()))}); "
        f"closes seen {dict(sorted(closes.items()))}; internal_error replies retried: "
        f"{sum(t.internal_errors for t in tabs)}"
    )
    report.check(not violations, f"0 gaps, 0 duplicates, 0 final closes: {violations[:5]}")
    mismatched, events_checked = [], 0
    cmid_twice, lost, tools_bad = [], [], []
    approved = denied = cancelled = executed = interrupted = 0
    for tab in tabs:
        events, *_ = truths[tab.session_id]
        expected = {e.seq: (e.kind, e.data) for e in events}
        events_checked += len(expected)
        if tab.log != expected:
            seqs = set(expected) | set(tab.log)
            wrong = sorted(s for s in seqs if tab.log.get(s) != expected.get(s))
            mismatched.append(f"{tab.name}: seqs {wrong[:5]}")
        logged = {e.data.get("client_message_id") for e in events if _input(e)}
        lost += sorted(tab.acked - logged)
    for sid, (events, approvals, _head, active, n_interrupted) in truths.items():
        interrupted += n_interrupted
        cmids = collections.Counter(e.data["client_message_id"] for e in events if _input(e))
        cmid_twice += [c for c, n in cmids.items() if n > 1]
        results = collections.Counter(
            e.data["tool_call_id"] for e in events if e.kind == "tool.result"
        )
        ok_results = collections.Counter(
            e.data["tool_call_id"] for e in events if e.kind == "tool.result" and e.data.get("ok")
        )
        # A regenerate or an edit may ask for the same write again (a new
        # gate on the same file): the file's lines are counted against the
        # gates that target it. Each ran at most once: a gate approved with
        # an ok result wrote exactly one line, and no other gate wrote one.
        by_file: dict[str, list] = collections.defaultdict(list)
        for a in approvals:
            if results[a.tool_call_id] > 1:
                tools_bad.append(f"{a.id}: {results[a.tool_call_id]} results")
            by_file[a.args.get("path", "")].append(a)
            if a.status == "approved":
                approved += 1
            elif a.status == "denied":
                denied += 1
            elif a.status == "cancelled":
                cancelled += 1
            else:
                tools_bad.append(f"{a.id} still {a.status}")
        for path, gates in by_file.items():
            target = workspace_for(sid) / path
            lines = len(target.read_text().splitlines()) if target.is_file() else 0
            executed += lines
            approved_here = [a for a in gates if a.status == "approved"]
            ran = sum(1 for a in approved_here if ok_results[a.tool_call_id])
            if not ran <= lines <= len(approved_here):
                tools_bad.append(
                    f"{path}: {lines} lines for {len(approved_here)} approved gates "
                    f"({ran} with an ok result) of {len(gates)}"
                )
        if active:
            tools_bad.append(f"session {sid}: {active} runs active")
    report.check(
        not mismatched,
        f"every tab's transcript equals the server's log ({events_checked:,} events): "
        f"{mismatched[:3]}",
    )
    report.check(not cmid_twice, f"no client_message_id appended twice: {cmid_twice[:5]}")
    report.check(not lost, f"every acknowledged message is in the log: missing {lost[:5]}")
    report.check(
        not tools_bad,
        f"approved tools ran at most once ({approved} approved, {executed} executions), "
        f"denied or cancelled with their branch never ({denied} denied, {cancelled} "
        f"cancelled), no run left active: {tools_bad[:5]}",
    )
    switched = sum(1 for evs, *_ in truths.values() for e in evs if e.kind == "branch.switched")
    report.figure(
        f"conversation control: {sum(t.switches for t in tabs)} switches sent "
        f"({switched} changed a path), regenerates and edits in every tab's script"
    )
    report.figure(f"runs finished 'interrupted' by the faults: {interrupted}")
