"""The chaos suite: continuity under socket cuts, process kills, restarts and fuzz.

One command, two sizes:

    .venv/bin/python bench/chaos.py --short          # CI: about a minute per profile
    .venv/bin/python bench/chaos.py                  # the full run (docs/reliability.md)

The profile comes from the environment, as for every command here: embedded
(SQLite, in-memory layer, runs in daphne) without ``DATABASE_URL``; with
``DATABASE_URL`` and ``REDIS_URL`` the production profile: two daphnes and
two run workers on PostgreSQL, and a Redis server of the suite's own (started
on a free port, so restarting it disturbs nothing else on the machine).

Phases (``--only`` picks some):

- ``cuts``: raw protocol tabs (``chaos_client.ChaosTab``), two per session,
  streaming runs and approval gates, each cutting its socket at random
  moments and at each boundary (mid-replay, just after a frame, just after a
  ``send`` or a ``decide``); with ``--browser N``, N Chromium tabs follow the
  same sessions and are cut by the client's test hooks (drop, the
  after-receive / after-render / after-send failpoints, offline, reload).
  In the production profile, faults run at the same time: kill -9 of a
  daphne, kill -9 of a run worker, a Redis restart and (``--pg-restart``,
  root only) a PostgreSQL restart.
- ``fuzz``: hostile frames (``chaos_fuzz``) from many sockets.
- ``hostile``: what the second and third security reviews tried
  (``chaos_hostile``, ``chaos_sse``): error-reply amplification by sockets
  that never read, deactivations and password changes under live sockets,
  hostile Markdown in Chromium; SSE streams that never read, quick closes
  that would leak slots, a logout under a stream, a 20k-run session.
- ``sse``: readers of the SSE stream cut at random and purged under
  (``chaos_sse.cuts``): every seq once, in order, never past a hole.
- ``workers``: the processes executing runs (the run workers; embedded, the
  server) killed -9 and stopped with SIGTERM at random under streams and
  gated tools, and in production frozen with SIGSTOP past their lease
  (``chaos_workers``): every run ends ``end_turn`` (or ``error`` by the
  crash budget), each tool's effect is counted once, every answer is shown
  once.
- ``outages`` (production): the suite's Redis stopped for 5 s (60 s in the
  full run) under one user's tabs at their socket limit, while answers
  stream (``chaos_outages``): no slot leaks, every tab live again within
  5 s of its return and with every seq once, ``/readyz`` truthful, the
  outage a few log lines.
- ``database`` (production): the servers reach PostgreSQL through PgBouncer
  (the runbook's configuration) and the suite's ``netfault`` proxy; PgBouncer
  is killed for 3 s (20 s), PostgreSQL restarted and stopped for 5 s (30 s)
  under tabs, SSE readers, AI SDK and AG-UI streams and probes
  (``chaos_database``): every seq once, every answer ``end_turn``, only 200s
  and retryable 503s, no stream silent past its heartbeat.
- ``network`` (production): latency (5 ms each way; 10 in the full run) and
  then loss (1 %; 2 %) on the way to PostgreSQL and Redis, through the
  suite's ``netfault`` proxy (``chaos_network``): nothing lost, and a
  resume's p99 grows by what the latency adds to its median, no more.
- ``rolling`` (production): the runbook's rolling restart of the daphnes
  behind the recipe's nginx (TLS) under 100 tabs (200 full) following
  streaming answers (``chaos_rolling``): every tab live again within 3 s, no
  502, every seq once.

Then it checks, and prints, the invariants: every socket saw ``after+1 ...
head`` with no gap and no repeat; every tab's final transcript equals the
server's log; every approved tool ran at most once and exactly once when its
result was logged, every denied one never; no run is left active; no
``client_message_id`` appended twice; every acknowledged message is in the
log; no close its client treats as final; no traceback in any server log.
Exit status 1 if any invariant failed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    """A redis-server of the suite's own, restartable without touching anyone else's."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> PrivateRedis:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the suite's redis-server did not start")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def _ensure_database(url: str) -> None:
    """Create the PostgreSQL database DATABASE_URL names if it does not exist yet."""
    from urllib.parse import urlparse

    import psycopg

    name = urlparse(url).path.lstrip("/")
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = %s", [name]).fetchone():
            conn.execute(f'create database "{name}"')


if os.environ.get("DATABASE_URL", "").startswith("postgres"):
    _ensure_database(os.environ["DATABASE_URL"])

# The production profile gets a Redis of its own before Django reads REDIS_URL.
REDIS: PrivateRedis | None = None
if os.environ.get("REDIS_URL") and shutil.which("redis-server"):
    REDIS = PrivateRedis().start()
    os.environ["REDIS_URL"] = REDIS.url

import django_setup  # noqa: E402, F401 (sets up Django)
from chaos_client import ChaosTab  # noqa: E402
from chaos_phases import (  # noqa: E402
    Report,
    browser_phase,
    fault_loop,
    fuzz_phase,
    raw_tabs_done,
)
from chaos_verify import verify  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from sessions_app.log.sessions import create_session  # noqa: E402
from tests.harness import Daphne, Worker, session_cookie  # noqa: E402

SCRIPT = [
    "/stream 80 40",
    "/write chaos/{cmid}.txt {cmid}",
    "@regenerate",
    "/stream 15 20",
    "@switch",
    "/write chaos/{cmid}.txt {cmid}",
    "@edit",
    "hello",
    "@switch",
]
SESSIONS_PER_USER = 5
# Short leases so a killed worker's runs are finished within seconds.
SERVER_ENV = {
    "AGENT_TEST_HOOKS": "1",
    "AGENT_LEASE_SECONDS": "3",
    "AGENT_SWEEP_SECONDS": "1",
    "AGENT_WORKER_GRACE_SECONDS": "2",
    "AGENT_USER_MAX_SOCKETS": "200",
    # Each user's five sessions get two tabs sending at random: far more runs
    # waiting than a person queues. The suite tests continuity, not the quota
    # (tests/web/test_api.py does), so the quota is out of its way.
    "AGENT_USER_MAX_QUEUED_RUNS": "10000",
}


class Cluster:
    """The servers under test: one daphne (embedded) or two daphnes and two workers."""

    def __init__(self, log_dir: Path, **env: str):
        self.log_dir = log_dir
        self.env = {**SERVER_ENV, **env}
        self.production = settings.AGENT_RUNNER == "worker"
        self.daphnes = [Daphne(log_dir, **self.env).start()]
        self.workers: list[Worker] = []
        if self.production:
            self.daphnes.append(Daphne(log_dir, **self.env).start())
            self.workers = [Worker(log_dir, **self.env).start() for _ in range(2)]
        self.dead_logs: list[str] = []

    def urls(self) -> list[str]:
        return [d.ws for d in self.daphnes]

    def restart_daphne(self, index: int, graceful: bool = False) -> None:
        """kill -9 (or, ``graceful``, SIGTERM) a daphne and start it again on its port."""
        if graceful:
            self.daphnes[index].stop()
        else:
            self.daphnes[index].kill()
        self.dead_logs.append(self.daphnes[index].log_text())
        self.daphnes[index].start_again()

    def replace_worker(self, index: int, graceful: bool = False) -> None:
        """kill -9 a worker and start another; ``graceful``: start the other
        first, then SIGTERM this one (a rolling deploy)."""
        if graceful:
            fresh = Worker(self.log_dir, **self.env).start()
            self.workers[index].stop()
        else:
            self.workers[index].kill()
        self.dead_logs.append(self.workers[index].log_text())
        self.workers[index] = fresh if graceful else Worker(self.log_dir, **self.env).start()

    def logs(self) -> list[str]:
        return self.dead_logs + [p.log_text() for p in self.daphnes + self.workers]

    def tracebacks(self) -> int:
        """Tracebacks in the servers' logs, less one kind that is no failure: a
        client that left while Django ran a sync middleware on a thread leaves
        asgiref's shielded future cancelled and unread, which asyncio logs
        ("Future exception was never retrieved", CancelledError)."""
        total = 0
        for text in self.logs():
            total += len(re.findall(r"^Traceback", text, re.M))
            total -= len(
                re.findall(r"^future: <Future finished exception=CancelledError\(\)>$", text, re.M)
            )
        return total

    def stop(self) -> None:
        for p in self.workers + self.daphnes:
            p.stop()


def _sessions(n: int, tag: str):
    User = get_user_model()
    user, _ = User.objects.get_or_create(username=f"chaos-{tag}")
    return user, [create_session(user, f"chaos {tag} {i}") for i in range(n)]


def _owned_sessions(n: int) -> list[tuple[object, object, str]]:
    """``n`` sessions, five per user (each user under AGENT_USER_MAX_RUNS), with
    each owner's cookie."""
    out = []
    for first in range(0, n, SESSIONS_PER_USER):
        user, sessions = _sessions(min(SESSIONS_PER_USER, n - first), f"cuts{first}")
        cookie = session_cookie(user)
        out += [(user, session, cookie) for session in sessions]
    return out


async def cuts_phase(cluster: Cluster, args, report: Report) -> None:
    owned = await asyncio.to_thread(_owned_sessions, args.sessions)
    sessions = [s for _, s, _ in owned]
    probe_user, (probe_session,) = await asyncio.to_thread(_sessions, 1, "probe")
    probe = (probe_session, await asyncio.to_thread(session_cookie, probe_user))
    rng = random.Random(args.seed)
    tabs = [
        ChaosTab(
            f"s{i}t{j}",
            cluster.urls,
            cookie,
            s.id,
            s.epoch,
            SCRIPT,
            random.Random(rng.random()),
            args.cuts_per_tab,
        )
        for i, (_, s, cookie) in enumerate(owned)
        for j in range(2)
    ]
    stop = asyncio.Event()
    stop.set()  # tabs end once cut out and settled
    started = time.monotonic()
    tracebacks_before = cluster.tracebacks()
    faults = None
    if cluster.production and args.faults:
        faults = asyncio.ensure_future(fault_loop(cluster, REDIS, args, report, probe))
    browser = None
    if args.browser:
        browser = asyncio.ensure_future(
            asyncio.to_thread(
                browser_phase, cluster, sessions[:SESSIONS_PER_USER], owned[0][0], args, report
            )
        )
    try:
        await asyncio.wait_for(asyncio.gather(*(t.run(stop) for t in tabs)), args.timeout)
    except TimeoutError:
        unsettled = [t for t in tabs if not (t.settled and t.cuts_left <= 0)]
        report.fail(f"cuts: {len(unsettled)} tabs not settled after {args.timeout} s")
        for tab in unsettled[:20]:
            print(f"       {tab.describe()}", flush=True)
    elapsed = time.monotonic() - started
    raw_tabs_done.set()  # the Chromium tabs now wait for the runs to end, then check
    if faults is not None:
        await faults
    if browser is not None:
        await browser
    await verify(tabs, sessions, report, elapsed)
    tracebacks = cluster.tracebacks() - tracebacks_before
    if faults is not None:
        # A server logs what failed while Redis or PostgreSQL was away.
        report.figure(f"errors logged with a traceback during the faults: {tracebacks}")
    else:
        report.check(tracebacks == 0, f"cuts: tracebacks in the server logs: {tracebacks}")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="the CI size")
    parser.add_argument(
        "--only",
        default="cuts,fuzz,hostile,sse,workers,outages,database,network,rolling",
        help="phases: cuts,fuzz,hostile,sse,workers,outages,database,network,rolling",
    )
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "1")))
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--cuts-per-tab", type=int, default=None)
    parser.add_argument("--browser", type=int, default=None, help="Chromium tabs (0: none)")
    parser.add_argument("--browser-cuts", type=int, default=None)
    parser.add_argument("--fuzz-frames", type=int, default=None)
    parser.add_argument("--no-faults", dest="faults", action="store_false")
    parser.add_argument("--pg-restart", action="store_true", help="restart PostgreSQL (root)")
    parser.add_argument("--timeout", type=float, default=None)
    args = parser.parse_args()
    # One line per HTTP request of the SSE and workers phases would bury the report.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    short = args.short
    args.sessions = args.sessions or (6 if short else 50)
    args.cuts_per_tab = args.cuts_per_tab if args.cuts_per_tab is not None else 5 if short else 10
    if args.browser is None:
        args.browser = 2 if short else 4
    args.browser_cuts = args.browser_cuts or (10 if short else 100)
    args.fuzz_frames = args.fuzz_frames or (5_000 if short else 100_000)
    args.timeout = args.timeout or (240 if short else 420)
    args.hostile_seconds = 6 if short else 30
    args.hostile_sockets = 4 if short else 16
    args.hostile_users = 4 if short else 20
    args.hostile_markdown = 3 if short else 9
    args.sse_readers = 3 if short else 8
    args.sse_turns = 8 if short else 30
    args.sse_non_readers = 6 if short else 20
    # Each quick close may hold a database connection until its thread is
    # collected (notes: Django's sync middleware under ASGI): the short run
    # stays well under PostgreSQL's 100.
    args.sse_quick_closes = 40 if short else 200
    args.worker_sessions = 6 if short else 30
    # A stalled worker: frozen past its lease (AGENT_LEASE_SECONDS=3 here).
    args.stall_seconds = 4 if short else 10
    # The suite's Redis stopped this long (the outages phase, production).
    args.outage_seconds = 5 if short else 60
    # PgBouncer killed, and PostgreSQL stopped, this long (the database phase).
    args.bouncer_seconds = 3 if short else 20
    args.database_seconds = 5 if short else 30
    # Latency each way and loss on the way to PostgreSQL and Redis (network).
    args.net_delay_ms = 5 if short else 10
    args.net_loss = 0.01 if short else 0.02
    args.net_resumes = 100 if short else 200
    # Tabs through nginx while the daphnes restart one by one (rolling).
    args.rolling_tabs = 100 if short else 200

    call_command("migrate", verbosity=0)
    profile = (
        f"database={connection.vendor} "
        f"layer={settings.CHANNEL_LAYERS['default']['BACKEND'].rsplit('.', 1)[-1]} "
        f"runner={settings.AGENT_RUNNER}"
    )
    print(
        f"chaos ({'short' if short else 'full'}), seed {args.seed}: {profile}; "
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus"
    )
    log_dir = Path(tempfile.mkdtemp(prefix="agent-chaos-"))
    report = Report()
    phases = set(args.only.split(","))
    clusters = []
    try:
        if "cuts" in phases:
            clusters.append(Cluster(log_dir))
            await cuts_phase(clusters[-1], args, report)
            clusters[-1].stop()
        if "fuzz" in phases:
            # Fresh servers: what the faults left behind is not the fuzz's doing.
            clusters.append(Cluster(log_dir))
            user, (session,) = await asyncio.to_thread(_sessions, 1, "fuzz")
            await fuzz_phase(clusters[-1], user, session, args, report)
            # Each phase's servers stop with it: four clusters alive at once
            # (2 daphnes and 2 workers each) exhaust PostgreSQL's 100 connections.
            clusters[-1].stop()
        if "hostile" in phases:
            import chaos_hostile  # after Django's set-up, which the sort would put it before

            clusters.append(Cluster(log_dir))
            hostile = clusters[-1]
            user, _ = await asyncio.to_thread(_sessions, 1, "hostile")
            await chaos_hostile.amplification(
                hostile, await asyncio.to_thread(session_cookie, user), args, report
            )
            await chaos_hostile.rights(hostile, args, report)
            if args.browser:
                await asyncio.to_thread(chaos_hostile.markdown, hostile, args, report)
            import chaos_sse

            await asyncio.to_thread(chaos_sse.non_readers, hostile, user, args, report)
            await asyncio.to_thread(chaos_sse.quick_closes, hostile, user, args, report)
            await asyncio.to_thread(chaos_sse.logout, hostile, user, args, report)
            await asyncio.to_thread(chaos_sse.twenty_k_runs, hostile, user, args, report)
            tracebacks = hostile.tracebacks()
            report.check(tracebacks == 0, f"hostile: tracebacks in the server logs: {tracebacks}")
            hostile.stop()
        if "sse" in phases:
            import chaos_sse

            clusters.append(Cluster(log_dir))
            user, (session,) = await asyncio.to_thread(_sessions, 1, "sse")
            await asyncio.to_thread(chaos_sse.cuts, clusters[-1], user, session, args, report)
            clusters[-1].stop()
        if "workers" in phases:
            import chaos_workers

            clusters.append(Cluster(log_dir, **chaos_workers.ENV))
            await chaos_workers.workers_phase(clusters[-1], args, report)
            clusters[-1].stop()
        if "outages" in phases and settings.AGENT_RUNNER == "worker" and REDIS is not None:
            import chaos_outages

            clusters.append(Cluster(log_dir, **chaos_outages.ENV))
            await chaos_outages.outages_phase(clusters[-1], REDIS, args, report)
            clusters[-1].stop()
        if "database" in phases and settings.AGENT_RUNNER == "worker":
            import chaos_database

            await chaos_database.database_phase(
                lambda **env: Cluster(log_dir, **env), log_dir, args, report
            )
        if "network" in phases and settings.AGENT_RUNNER == "worker" and REDIS is not None:
            import chaos_network

            await chaos_network.network_phase(
                lambda **env: Cluster(log_dir, **env), REDIS, log_dir, args, report
            )
        if "rolling" in phases and settings.AGENT_RUNNER == "worker":
            import chaos_rolling

            await chaos_rolling.rolling_phase(SERVER_ENV, log_dir, args, report)
    finally:
        for cluster in clusters:
            cluster.stop()
        if REDIS is not None:
            REDIS.kill()
    print(f"server logs: {log_dir}")
    return report.summary()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
