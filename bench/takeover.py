"""Benchmark: runs outliving their workers (production profile only).

Scenario: RUNS sessions, each followed by one raw protocol client, are sent
``/stream N MS`` at once on two run workers. Then:

- ``kill``: the worker holding the most runs is killed -9 (a fresh one is
  started in its place); for every run it held, the stall is the time from
  the kill to the run's next delta after its ``run.resumed`` (p50, p99, max);
- ``deploy``: both workers are stopped with SIGTERM in turn, a new one started
  first each time (a rolling deploy); it prints how many runs ended other
  than ``end_turn`` (the promise: 0) and the longest gap between two deltas
  of one run seen by its client.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/takeover.py --runs 50

Every figure comes from the clients' clocks (frames received), except the
kill's instant, taken by this process just before the signal.

First it measures what keeping leases costs: one worker's renewal beat (one
statement, however many runs it holds) for ``--renewals`` runs, and so the
database time a second that the default lease (3 s, a beat a second) takes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
from common import SHIPPED_ARGS, emit, percentile, profile_line  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import Run  # noqa: E402
from tests.harness import Daphne, Worker, WsClient, session_cookie  # noqa: E402


class Follower:
    """One client on one session; reads when each of its run's frames arrived
    (``WsClient.arrivals``, this machine's clock)."""

    def __init__(self, client: WsClient):
        self.client = client
        self.run_id = ""

    def _timed(self, kind: str) -> list[float]:
        c = self.client
        return [t for f, t in zip(c.frames, c.arrivals, strict=False) if f.get("kind") == kind]

    @property
    def deltas(self) -> list[float]:
        return self._timed("assistant.delta")

    @property
    def resumed(self) -> list[float]:
        return self._timed("run.resumed")

    def first_delta_after(self, t: float) -> float | None:
        later = [d for d in self.deltas if d > t]
        return later[0] if later else None

    @property
    def stop(self) -> str:
        for frame in self.client.frames:
            if frame.get("kind") == "run.finished":
                return frame["data"]["stop_reason"]
        return ""


async def _follow(server, user, session) -> Follower:
    client = await WsClient.connect(server.ws, session_cookie(user))
    follower = Follower(client)
    ok = await client.resume(session.id, 0)
    assert ok["type"] == "resume_ok", ok
    return follower


def _rows_of(run_ids: list[str]) -> list[tuple]:
    return list(Run.objects.filter(id__in=run_ids).values_list("id", "status", "worker", "state"))


async def _all_finished(followers: list[Follower], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(f.stop for f in followers):
        if time.monotonic() > deadline:
            stuck = [f.run_id for f in followers if not f.stop]
            rows = await asyncio.to_thread(_rows_of, stuck)
            raise TimeoutError(f"runs did not finish: {rows[:5]}")
        await asyncio.sleep(0.05)  # sleep-ok: polling the clients' own records


def _renewal_cost(n: int, beats: int = 50) -> tuple[float, float]:
    """(mean, p99) ms of one renewal beat of a worker holding ``n`` runs."""
    from sessions_app.runtime import leases

    User = get_user_model()
    user, _ = User.objects.get_or_create(username="tk-renewals")
    session = create_session(user, "renewals")
    worker = "bench:0:renewals"
    Run.objects.bulk_create(
        Run(
            session=session,
            client_message_id=f"r{i}",
            text="x",
            message_seq=i + 1,
            status=Run.Status.RUNNING,
            worker=worker,
        )
        for i in range(n)
    )
    ids = list(Run.objects.filter(worker=worker).values_list("id", flat=True))
    times = []
    for _ in range(beats):
        began = time.perf_counter()
        kept = leases.renew(ids, worker)
        times.append((time.perf_counter() - began) * 1000)
        assert len(kept) == n
    Run.objects.filter(worker=worker).update(status=Run.Status.FINISHED, worker="")
    return sum(times) / len(times), percentile(times, 0.99)


def _held(pid: int) -> list[str]:
    return list(
        Run.objects.filter(status=Run.Status.RUNNING, worker__contains=f":{pid}:").values_list(
            "id", flat=True
        )
    )


async def _start(server, runs: int, stream: str, tag: str) -> list[Follower]:
    User = get_user_model()
    followers: list[Follower] = []
    sends = []
    for i in range(runs):
        user, _ = User.objects.get_or_create(username=f"tk{i}")
        session = create_session(user, f"takeover {tag} {i}")
        followers.append(await _follow(server, user, session))
    for i, f in enumerate(followers):
        frame = {"type": "send", "client_message_id": f"{tag}{i}", "text": f"/stream {stream}"}
        sends.append(f.client.request(frame))
    replies = await asyncio.gather(*sends)
    for f, reply in zip(followers, replies, strict=True):
        f.run_id = reply["run_id"]
    # Every run streaming before the fault.
    deadline = time.monotonic() + 60
    while not all(f.deltas for f in followers):
        if time.monotonic() > deadline:
            raise TimeoutError("runs did not start")
        await asyncio.sleep(0.05)  # sleep-ok: polling the clients' own records
    return followers


async def _kill(server, workers, log_dir, env, args) -> dict:
    followers = await _start(server, args.runs, args.stream, "k")
    await asyncio.sleep(1.5)  # sleep-ok: let a checkpoint or two pass first
    holding = [await asyncio.to_thread(_held, w.proc.pid) for w in workers]
    index = max(range(len(workers)), key=lambda i: len(holding[i]))
    victims = set(holding[index])
    t0 = time.time()
    os.kill(workers[index].proc.pid, signal.SIGKILL)
    workers[index] = Worker(log_dir, **env).start()
    await _all_finished(followers, args.timeout)
    stalls = []
    for f in followers:
        if f.run_id in victims and f.resumed:
            after = f.first_delta_after(f.resumed[0])
            if after is not None:
                stalls.append((after - t0) * 1000)
    stops = collections.Counter(f.stop for f in followers)
    for f in followers:
        await f.client.close()
    return {"held": len(victims), "taken_over": len(stalls), "stalls": stalls, "stops": stops}


async def _deploy(server, workers, log_dir, env, args) -> dict:
    followers = await _start(server, args.runs, args.stream, "d")
    t0 = time.monotonic()
    for index in range(len(workers)):
        fresh = Worker(log_dir, **env).start()  # the new one first
        workers[index].proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(workers[index].proc.wait, 60)
        workers[index] = fresh
    deploy_s = time.monotonic() - t0
    await _all_finished(followers, args.timeout)
    gaps = [
        max((b - a) * 1000 for a, b in zip(f.deltas, f.deltas[1:], strict=False))
        for f in followers
        if len(f.deltas) > 1
    ]
    stops = collections.Counter(f.stop for f in followers)
    handed = sum(1 for f in followers if f.resumed)
    for f in followers:
        await f.client.close()
    return {"deploy_s": deploy_s, "gaps": gaps, "stops": stops, "handed": handed}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--stream", default="300 30", help="N MS for /stream (9 s by default)")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--renewals", type=int, default=200, help="runs one worker holds")
    args = parser.parse_args()
    if settings.AGENT_RUNNER != "worker":
        sys.exit("bench/takeover.py needs the production profile (DATABASE_URL and REDIS_URL)")
    call_command("migrate", verbosity=0)
    print(profile_line())
    mean, p99 = _renewal_cost(args.renewals)
    beat = settings.AGENT_LEASE_SECONDS / 3
    print(
        f"lease renewal of {args.renewals} runs held by one worker: one statement, "
        f"mean {mean:.2f} ms, p99 {p99:.2f} ms, a beat every {beat:g} s "
        f"(= {mean / beat:.2f} ms of database time a second)"
    )
    env = {"AGENT_TEST_HOOKS": "0", "AGENT_USER_MAX_RUNS": "0"}
    log_dir = Path(tempfile.mkdtemp(prefix="agent-bench-logs-"))
    workers = [Worker(log_dir, **env).start() for _ in range(2)]
    server = Daphne(log_dir, args=SHIPPED_ARGS, **env).start()
    try:
        killed = await _kill(server, workers, log_dir, env, args)
        deployed = await _deploy(server, workers, log_dir, env, args)
    finally:
        for p in [*workers, server]:
            p.stop()
    stalls = killed["stalls"]
    print(
        f"\nkill -9 of the worker holding {killed['held']} of {args.runs} runs "
        f"(/stream {args.stream}): {killed['taken_over']} taken over; kill to the next delta: "
        f"p50 {percentile(stalls, 0.5):.0f} ms, p99 {percentile(stalls, 0.99):.0f} ms, "
        f"max {max(stalls, default=float('nan')):.0f} ms; ends {dict(killed['stops'])}"
    )
    gaps = deployed["gaps"]
    print(
        f"rolling deploy of both workers with {args.runs} runs in flight "
        f"({deployed['deploy_s']:.1f} s): {deployed['handed']} runs handed over, "
        f"ends {dict(deployed['stops'])}; longest stall between two deltas of a run: "
        f"{max(gaps, default=float('nan')):.0f} ms (p50 of runs' longest "
        f"{percentile(gaps, 0.5):.0f} ms)"
    )
    emit(
        "takeover",
        runs=args.runs,
        renewal_ms=mean,
        takeover_p50_ms=percentile(stalls, 0.5),
        takeover_p99_ms=percentile(stalls, 0.99),
        deploy_not_end_turn=sum(n for k, n in deployed["stops"].items() if k != "end_turn"),
        deploy_longest_stall_ms=max(gaps, default=float("nan")),
    )


if __name__ == "__main__":
    asyncio.run(main())
