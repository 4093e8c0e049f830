"""The chaos suite's ``workers`` phase: the processes that execute runs are
killed -9 and stopped with SIGTERM at random while many runs stream and run
tools (docs/agents.md, "Steps and checkpoints").

Production: the run workers (a SIGTERM'd one is replaced first, as in a
rolling deploy; a killed one after). Embedded: the one daphne, which executes
the runs (killed -9 and started again, or stopped and started again).

Each session runs a script of streams and gated tools over the REST API
(``slow_count``, a second-long tool that counts its executions, and
``write_file``); every gate, the re-asked ones too, is approved. Invariants:

- every run ends ``end_turn``, or ``error`` by the crash budget;
- each tool call's effect is counted once: a file's lines equal the ok
  results of the calls that wrote it (``write_file`` is idempotent); the
  counter's executions lie between its ok results and those plus its
  ``unknown`` ones (a kill between its end and its result's commit);
- every answer is shown once: the deltas of a run's last segment, cut back
  by each ``run.resumed``, equal its message.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import time

import httpx
from chaos_verify import Report, _db
from django.contrib.auth import get_user_model

from sessions_app.log.events import read_events
from sessions_app.log.sessions import create_session
from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime.durable import crash_limit_message
from sessions_app.runtime.tools import workspace_for
from tests.durable_tools import TOOLS, lines
from tests.harness import api_key

SCRIPT = [
    "/stream 150 20",
    "/tool slow_count",
    "/write chaos/{i}.txt line {i}",
    "/stream 150 20",
    "/tool slow_count",
]
ENV = {"AGENT_TOOLS": TOOLS}


def _setup(n: int) -> list[tuple[str, str]]:
    """``n`` sessions, five per user; (session id, API key) each."""
    User = get_user_model()
    out = []
    for first in range(0, n, 5):
        user, _ = User.objects.get_or_create(username=f"chaos-workers{first}")
        key = api_key(user)
        out += [(create_session(user, f"workers {first + i}").id, key) for i in range(5)]
    return out[:n]


def _pending(session_id: str) -> list[str]:
    return list(
        ApprovalRequest.objects.filter(session_id=session_id, status="pending").values_list(
            "id", flat=True
        )
    )


def _held_by(pid: int) -> int:
    return Run.objects.filter(status=Run.Status.RUNNING, worker__contains=f":{pid}:").count()


def _finished(run_id: str) -> bool:
    return Run.objects.filter(id=run_id, status=Run.Status.FINISHED).exists()


async def _call(http, cluster, method: str, path: str, key: str, body: dict) -> httpx.Response:
    """One API request to any daphne; retried while the servers are down."""
    for _ in range(200):
        base = random.choice(cluster.daphnes).http
        try:
            r = await http.request(
                method, base + path, json=body, headers={"Authorization": f"Token {key}"}
            )
        except httpx.HTTPError:
            await asyncio.sleep(0.25)  # sleep-ok: the server is restarting; back off
            continue
        if r.status_code < 500 and r.status_code != 429:
            return r
        await asyncio.sleep(0.25)  # sleep-ok: retryable answer; back off
    raise RuntimeError(f"{method} {path} never went through")


async def _drive(http, cluster, session_id: str, key: str, index: int, deadline: float) -> None:
    """Send the script, one turn after the other, approving every gate."""
    for step, text in enumerate(SCRIPT):
        body = {"client_message_id": f"w{index}-{step}", "text": text.format(i=index)}
        r = await _call(http, cluster, "POST", f"/api/sessions/{session_id}/messages/", key, body)
        run_id = r.json()["run_id"]
        while not await _db(_finished, run_id):
            if time.monotonic() > deadline:
                return
            for approval in await _db(_pending, session_id):
                path = f"/api/approvals/{approval}/decide/"
                await _call(http, cluster, "POST", path, key, {"decision": "approve"})
            await asyncio.sleep(0.2)  # sleep-ok: a database state no frame announces


async def _faults(cluster, args, stop: asyncio.Event, counts: collections.Counter) -> None:
    """kill -9 or SIGTERM a run-executing process every 1.5-3.5 s; in
    production also stall one (SIGSTOP for ``args.stall_seconds``, past its
    lease, then SIGCONT): its runs are taken over while it may be inside a
    transaction or a tool, and it wakes to find them gone (docs/agents.md,
    "Tool calls and crashes": the fencing token)."""
    rng = random.Random(args.seed)
    kinds = ["kill", "term", "stall"] if cluster.production else ["kill", "term"]
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), rng.uniform(1.5, 3.5))
            return
        except TimeoutError:
            pass
        how = rng.choice(kinds)
        counts[how] += 1
        if cluster.production:
            # The worker holding the most runs (an idle one proves nothing).
            held = [await _db(_held_by, w.proc.pid) for w in cluster.workers]
            index = max(range(len(held)), key=lambda i: (held[i], rng.random()))
            if how == "stall":
                await _stall(cluster.workers[index], args.stall_seconds)
            else:
                await asyncio.to_thread(cluster.replace_worker, index, how == "term")
        else:
            await asyncio.to_thread(cluster.restart_daphne, 0, how == "term")


async def _stall(worker, seconds: float) -> None:
    """Freeze a worker (SIGSTOP) and let it go on (SIGCONT) ``seconds`` later."""
    os.killpg(worker.proc.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)  # sleep-ok: the length of the freeze is the fault
    finally:
        os.killpg(worker.proc.pid, signal.SIGCONT)


def figures_of(sessions: list[str]) -> str:
    """How the runs went on: run.resumed by reason, and unknown outcomes re-asked."""
    resumed = collections.Counter(
        e.data["reason"] for sid in sessions for e in read_events(sid, 0) if e.kind == "run.resumed"
    )
    asked = ApprovalRequest.objects.filter(session_id__in=sessions)
    unknown = sum(
        1
        for sid in sessions
        for e in read_events(sid, 0)
        if e.kind == "tool.result" and e.data["output"].startswith("unknown:")
    )
    return (
        f"runs taken over {resumed['takeover']}, handed over {resumed['handover']}; "
        f"{asked.count()} gates, {unknown} outcomes unknown and asked again"
    )


def _verify(sessions: list[str]) -> dict:
    bad_ends, bad_effects, doubled = [], [], []
    ends: collections.Counter = collections.Counter()
    for sid in sessions:
        events = read_events(sid, 0)
        for run in Run.objects.filter(session_id=sid):
            ends[run.stop_reason or run.status] += 1
            allowed = run.stop_reason == "end_turn" or (
                run.stop_reason == "error" and run.error.startswith(crash_limit_message(0)[:20])
            )
            if not allowed:
                bad_ends.append(f"{run.id}: {run.status} {run.stop_reason} {run.error}")
            mine = [e for e in events if e.run_id == run.id]
            cut = max((i for i, e in enumerate(mine) if e.kind == "tool.result"), default=-1)
            text, said = "", None
            for e in mine[cut + 1 :]:
                if e.kind == "assistant.delta":
                    text += e.data["text"]
                elif e.kind == "run.resumed":
                    text = text[: e.data["keep"]]
                elif e.kind == "assistant.message":
                    said = e.data["text"]
            if said is not None and text and text != said:
                doubled.append(f"{run.id}: shown {text[-40:]!r}, said {said[-40:]!r}")
        calls = {e.data["tool_call_id"]: e.data for e in events if e.kind == "tool.call"}
        oks, unknown = collections.Counter(), collections.Counter()
        for e in events:
            if e.kind == "tool.result":
                target = calls[e.data["tool_call_id"]]["args"].get("path", "counts.txt")
                if e.data["ok"]:
                    oks[target] += 1
                elif e.data["output"].startswith("unknown:"):
                    unknown[target] += 1
        ws = workspace_for(sid)
        for path in set(oks) | {"counts.txt"}:
            # write_file is idempotent: its lines equal its ok results. The
            # counter is not: a kill in the instant between its end and its
            # result's commit is logged "unknown" though it counted, so its
            # executions lie between the ok results and ok + unknown.
            slack = unknown[path] if path == "counts.txt" else 0
            if not oks[path] <= lines(ws / path) <= oks[path] + slack:
                bad_effects.append(
                    f"{sid}/{path}: {lines(ws / path)} lines, {oks[path]} ok, "
                    f"{unknown[path]} unknown"
                )
    return {"ends": ends, "bad_ends": bad_ends, "bad_effects": bad_effects, "doubled": doubled}


async def workers_phase(cluster, args, report: Report) -> None:
    sessions = await _db(_setup, args.worker_sessions)
    deadline = time.monotonic() + args.timeout
    stop = asyncio.Event()
    counts: collections.Counter = collections.Counter()
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=30) as http:
        faults = asyncio.ensure_future(_faults(cluster, args, stop, counts))
        drivers = [
            _drive(http, cluster, sid, key, i, deadline) for i, (sid, key) in enumerate(sessions)
        ]
        await asyncio.gather(*drivers)
        stop.set()
        await faults
    elapsed = time.monotonic() - t0
    ids = [sid for sid, _ in sessions]
    result = await _db(_verify, ids)
    figures = await _db(figures_of, ids)
    report.figure(
        f"workers: {len(ids)} sessions x {len(SCRIPT)} turns in {elapsed:.1f} s under "
        f"{counts['kill']} kill -9, {counts['term']} SIGTERM and {counts['stall']} "
        f"{args.stall_seconds:g} s SIGSTOP of "
        f"{'run workers' if cluster.production else 'the server'}; {figures}"
    )
    report.check(
        not result["bad_ends"],
        f"workers: every run ended end_turn or error by the crash budget "
        f"{dict(result['ends'])}: {result['bad_ends'][:3]}",
    )
    report.check(
        not result["bad_effects"],
        f"workers: each tool call's effect counted once: {result['bad_effects'][:3]}",
    )
    report.check(
        not result["doubled"],
        f"workers: every answer shown once (deltas cut back by run.resumed equal the "
        f"message): {result['doubled'][:3]}",
    )
