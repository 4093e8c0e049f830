"""Benchmark: many agent runs at once (many users, two tabs per session).

Scenario: SESSIONS sessions, each owned by its own user and followed by two
tabs (raw protocol clients); RUNS of them are sent ``/stream N MS`` at the
same moment. Prints the time until every run finished at both tabs (and how
that compares with one run alone), events appended per second, the
append-to-receipt latency at the tabs (event ``ts`` to arrival, same clock),
gaps and duplicates seen, the peak thread count and RSS of every server and
worker process, and the peak number of PostgreSQL connections.

Production profile (one daphne, WORKERS run workers):

    createdb -h 127.0.0.1 -U postgres agentbench   # once
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/concurrent_runs.py \\
        --sessions 200 --runs 50 --stream "200 30" --workers 2

Embedded profile (runs inside the one daphne):

    .venv/bin/python bench/concurrent_runs.py --sessions 200 --runs 50

Compare figures within one run: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
from common import SHIPPED_ARGS, emit, percentile, profile_line, py_spy  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import AgentSession  # noqa: E402
from tests.harness import Daphne, Worker, WsClient, session_cookie  # noqa: E402


def _proc_status(pid: int) -> tuple[int, int]:
    """(threads, RSS in KiB) of a process."""
    threads = rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return threads, rss


class Sampler(threading.Thread):
    """Samples threads and RSS of the processes, and PostgreSQL connections."""

    def __init__(self, procs: dict[str, int]):
        super().__init__(daemon=True)
        self.procs = procs
        self.peak: dict[str, tuple[int, int]] = {name: (0, 0) for name in procs}
        self.pg_peak = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        from django.db import connections

        while not self.stopped.wait(0.1):
            for name, pid in self.procs.items():
                try:
                    t, r = _proc_status(pid)
                except OSError:
                    continue
                pt, pr = self.peak[name]
                self.peak[name] = (max(pt, t), max(pr, r))
            if settings.IS_POSTGRES:
                with connections["default"].cursor() as cur:
                    cur.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    )
                    self.pg_peak = max(self.pg_peak, cur.fetchone()[0])
        connections["default"].close()


def _ts(frame) -> float:
    return datetime.fromisoformat(frame["ts"].replace("Z", "+00:00")).timestamp()


def _users_and_sessions(n: int):
    User = get_user_model()
    out = []
    for i in range(n):
        user, _ = User.objects.get_or_create(username=f"cr{i}")
        out.append((user, create_session(user, f"bench {i}")))
    return out


async def _follow(server, cookie, session) -> WsClient:
    c = await WsClient.connect(server.ws, cookie)
    ok = await c.resume(session.id, 0)
    assert ok["type"] == "resume_ok", ok
    return c


async def _scenario(server, pairs, runs: int, stream: str, label: str) -> dict:
    cookies = [session_cookie(user) for user, _ in pairs]
    tabs: list[tuple[WsClient, WsClient]] = []
    for (_, session), cookie in zip(pairs, cookies, strict=True):
        first = await _follow(server, cookie, session)
        tabs.append((first, await _follow(server, cookie, session)))
    heads_before = sum(AgentSession.objects.values_list("head", flat=True))
    t0 = time.time()
    t_send = time.perf_counter()
    sends = await asyncio.gather(
        *(
            tabs[i][0].request(
                {"type": "send", "client_message_id": f"{label}-{i}", "text": f"/stream {stream}"},
                timeout=300,
            )
            for i in range(runs)
        )
    )
    assert all(s["type"] == "send_ok" for s in sends), sends
    for i, sent in enumerate(sends):
        for tab in tabs[i]:
            try:
                await tab.wait_event(
                    lambda f, r=sent["run_id"]: f["kind"] == "run.finished" and f["run_id"] == r,
                    timeout=120,
                )
            except TimeoutError:
                head = AgentSession.objects.get(id=pairs[i][1].id).head
                seqs = tab.seqs()
                missing = sorted(set(range(1, head + 1)) - set(seqs))
                raise SystemExit(
                    f"tab of session {i} never got run.finished: head {head}, "
                    f"received {len(seqs)} events, last {seqs[-3:]}, missing {missing[:20]}"
                ) from None
    elapsed = time.perf_counter() - t_send
    appended = sum(AgentSession.objects.values_list("head", flat=True)) - heads_before
    latencies = []
    by_second: dict[int, list[float]] = {}  # second of append since the send -> latencies
    finished_at = []  # each run.finished's ts: when the run's last event was appended
    gaps = dups = 0
    for pair in tabs:
        for tab in pair:
            seqs = tab.seqs()
            dups += len(seqs) - len(set(seqs))
            if seqs and seqs != list(range(1, seqs[-1] + 1)):
                gaps += 1
            for frame, arrived in zip(tab.frames, tab.arrivals, strict=True):
                live = arrived >= t0 and frame.get("kind") != "user.message"
                if frame.get("type") == "event" and live:
                    latencies.append((arrived - _ts(frame)) * 1000)
                    by_second.setdefault(int(_ts(frame) - t0), []).append(latencies[-1])
                    if frame["kind"] == "run.finished":
                        finished_at.append(_ts(frame) - t0)
    for pair in tabs:
        for tab in pair:
            await tab.close()
    latencies.sort()

    return {
        "elapsed": elapsed,
        "appended_by": max(finished_at),
        "appended": appended,
        "rate": appended / elapsed,
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
        "max": latencies[-1],
        "gaps": gaps,
        "dups": dups,
        "received": len(latencies),
        "timeline": {
            second: percentile(sorted(xs), 0.99) for second, xs in sorted(by_second.items())
        },
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--stream", default="200 30", help="N MS for /stream")
    parser.add_argument("--workers", type=int, default=2, help="run workers (production)")
    parser.add_argument("--concurrency", type=int, default=None, help="AGENT_WORKER_CONCURRENCY")
    parser.add_argument(
        "--py-spy", metavar="OUT", help="record the daphne (OUT) and each worker (OUT.worker-N)"
    )
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    print(profile_line())
    env = {"AGENT_TEST_HOOKS": "0", "AGENT_WORKER_GRACE_SECONDS": "2"}
    if args.concurrency:
        env["AGENT_WORKER_CONCURRENCY"] = str(args.concurrency)
    log_dir = Path(tempfile.mkdtemp(prefix="agent-bench-logs-"))
    procs = []
    if settings.AGENT_RUNNER == "worker":
        procs += [Worker(log_dir, **env).start() for _ in range(args.workers)]
    server = Daphne(log_dir, args=SHIPPED_ARGS, **env).start()
    procs.append(server)
    names = {f"{p.name}-{i}": p.proc.pid for i, p in enumerate(procs)}
    try:
        pairs = _users_and_sessions(args.sessions + 1)
        alone = await _scenario(server, pairs[-1:], 1, args.stream, "alone")
        sampler = Sampler(names)
        sampler.start()
        with contextlib.ExitStack() as profiles:
            if args.py_spy:
                for i, p in enumerate(procs[:-1]):
                    profiles.enter_context(py_spy(p.proc.pid, f"{args.py_spy}.worker-{i}"))
            profiles.enter_context(py_spy(server.proc.pid, args.py_spy))
            many = await _scenario(server, pairs[:-1], args.runs, args.stream, "many")
        sampler.stopped.set()
        sampler.join()
    finally:
        for p in procs:
            p.stop()
    print(
        f"\n{args.runs} concurrent runs of /stream {args.stream} over {args.sessions} sessions "
        f"(one user each, two tabs each = {2 * args.sessions} sockets)"
    )
    print(f"one run alone: {alone['elapsed']:.2f} s")
    print(
        f"all {args.runs} finished at both tabs: {many['elapsed']:.2f} s "
        f"({many['elapsed'] / alone['elapsed']:.2f}x one run alone)"
    )
    print(
        f"last run.finished appended after {many['appended_by']:.2f} s "
        f"(one run alone: {alone['appended_by']:.2f} s)"
    )
    print(f"events appended: {many['appended']:,} = {many['rate']:,.0f} events/s")
    print(
        f"append-to-receipt over {many['received']:,} event frames: p50 {many['p50']:.1f} ms, "
        f"p99 {many['p99']:.1f} ms, max {many['max']:.1f} ms"
    )
    timeline = ", ".join(f"{sec}s {p99:.0f}" for sec, p99 in many["timeline"].items())
    print(f"p99 ms by second of append since the send: {timeline}")
    print(f"tabs with a gap: {many['gaps']}; duplicate frames: {many['dups']}")
    for name, (threads, rss) in sampler.peak.items():
        print(f"{name}: peak threads {threads}, peak RSS {rss / 1024:.0f} MiB")
    if settings.IS_POSTGRES:
        print(f"PostgreSQL connections to the database, peak: {sampler.pg_peak}")
    emit(
        "concurrent_runs",
        runs=args.runs,
        wall_s=many["elapsed"],
        p99_ms=many["p99"],
        gaps=many["gaps"],
        dups=many["dups"],
    )


if __name__ == "__main__":
    asyncio.run(main())
