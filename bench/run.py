"""Benchmarks: append rate, resume cost against log length, live fan-out.

Usage (embedded profile, a fresh SQLite file under a temporary directory):

    .venv/bin/python bench/run.py

Production profile (uses the databases the URLs name; creates its own rows):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/run.py

It prints one table per measurement. Compare ratios within one run: these
machines are shared and noisy.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
from common import SHIPPED_ARGS  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from sessions_app.log.events import append_event  # noqa: E402
from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import AgentSession  # noqa: E402
from tests.harness import Daphne, Worker, WsClient, session_cookie  # noqa: E402
from tests.logs_made import session_with_deltas  # noqa: E402

LOG_LENGTHS = (1_000, 10_000, 100_000)
RESUMES = 30
REPLAY = 20
FANOUT = (1, 10, 50)
STREAM = 2_000


def _user():
    User = get_user_model()
    user, _ = User.objects.get_or_create(username="bench")
    return user


def _session_with_log(user, length: int) -> AgentSession:
    """A session whose log holds ``length`` events (bulk-written: setup, not measured)."""
    return session_with_deltas(user, length, f"bench {length}", text=lambda seq: "x")


def bench_append() -> None:
    user = _user()
    s = create_session(user)
    n = 2_000
    t0 = time.perf_counter()
    for i in range(n):
        append_event(s.id, "assistant.delta", {"text": f"t{i} "})
    dt = time.perf_counter() - t0
    print(
        f"\nappend (one writer, one transaction each): {n} events in {dt:.2f} s "
        f"= {n / dt:,.0f} events/s, {dt / n * 1e6:,.0f} µs each"
    )


async def bench_resume(server, cookie, sessions) -> None:
    print(f"\nresume after head-{REPLAY} (resume_ok + {REPLAY} events), median of {RESUMES}:")
    print(f"{'log length':>12} {'median ms':>10} {'p90 ms':>8}")
    for s in sessions:
        samples = []
        for _ in range(RESUMES):
            c = await WsClient.connect(server.ws, cookie)
            t0 = time.perf_counter()
            await c.resume(s.id, s.head - REPLAY, epoch=s.epoch)
            await c.wait_event(lambda f, h=s.head: f["seq"] == h)
            samples.append((time.perf_counter() - t0) * 1000)
            await c.close()
        samples.sort()
        print(
            f"{s.head:>12,} {statistics.median(samples):>10.2f} "
            f"{samples[int(len(samples) * 0.9)]:>8.2f}"
        )


async def bench_fanout(server, cookie) -> None:
    print(f"\nlive fan-out of /stream {STREAM} 0 (every socket receives every event):")
    print(f"{'sockets':>8} {'seconds':>8} {'events/s per socket':>20} {'frames/s total':>15}")
    for k in FANOUT:
        writer = await WsClient.connect(server.ws, cookie)
        ok = await writer.start()
        socks = [writer]
        for _ in range(k - 1):
            c = await WsClient.connect(server.ws, cookie)
            await c.resume(ok["session_id"], 0)
            socks.append(c)
        t0 = time.perf_counter()
        sent = await writer.request(
            {"type": "send", "client_message_id": f"f{k}", "text": f"/stream {STREAM} 0"}
        )
        for c in socks:
            await c.wait_event(
                lambda f, r=sent["run_id"]: f["kind"] == "run.finished" and f["run_id"] == r,
                timeout=300,
            )
        dt = time.perf_counter() - t0
        print(f"{k:>8} {dt:>8.2f} {STREAM / dt:>20,.0f} {STREAM * k / dt:>15,.0f}")
        for c in socks:
            await c.close()


async def main() -> None:
    from django.conf import settings

    call_command("migrate", verbosity=0)
    user = _user()
    print(
        f"profile: database={settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]} "
        f"layer={settings.CHANNEL_LAYERS['default']['BACKEND'].rsplit('.', 1)[-1]} "
        f"runner={settings.AGENT_RUNNER}; python {sys.version.split()[0]}; "
        f"{os.cpu_count()} cpus"
    )
    bench_append()
    sessions = [_session_with_log(user, n) for n in LOG_LENGTHS]
    log_dir = Path(tempfile.mkdtemp(prefix="agent-bench-logs-"))
    procs = []
    if settings.AGENT_RUNNER == "worker":
        procs.append(Worker(log_dir).start())
    server = Daphne(log_dir, args=SHIPPED_ARGS, AGENT_TEST_HOOKS="0").start()
    procs.append(server)
    try:
        cookie = session_cookie(user)
        await bench_resume(server, cookie, sessions)
        await bench_fanout(server, cookie)
    finally:
        for p in procs:
            p.stop()


if __name__ == "__main__":
    asyncio.run(main())
