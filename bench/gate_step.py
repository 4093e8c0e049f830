"""Benchmark: a step of several gates, from its last decision to its first tool.

Scenario: RUNS sessions, each its own user's and followed by one raw
protocol client, are sent ``/parallel GATES`` (a step of GATES gated
writes). Once every run is parked, each step's gates but the last are
decided; then:

- ``one by one``: each run's last gate is decided alone, the next only
  after the previous run finished (no load but the one run);
- ``at once``: another RUNS steps, their last gates decided at the same
  moment (a burst: every continuation queued together).

The figure is the time from the last decision's commit (the gate's
``decided_at``) to the step's first call marked started (its
``executed_at``, set right before the tool runs): both the server's clock,
one machine. It also prints how long the decide request took at the client.

    .venv/bin/python bench/gate_step.py --runs 50            # embedded
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/gate_step.py --runs 50
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
from common import emit, percentile, profile_line, start_servers  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import ApprovalRequest  # noqa: E402
from tests.harness import WsClient, session_cookie  # noqa: E402


class Step:
    """One session's client and its parked step."""

    def __init__(self, client: WsClient):
        self.client = client
        self.run_id = ""
        self.gates: list[str] = []
        self.decide_ms = 0.0

    async def park(self, tag: str, gates: int) -> None:
        # One gate: /write, which every version of the demo agent has (an A/B
        # against a main before steps).
        text = "/write b.txt x" if gates == 1 else f"/parallel {gates} b.txt"
        frame = {"type": "send", "client_message_id": tag, "text": text}
        self.run_id = (await self.client.request(frame))["run_id"]
        await self.client.wait_event(
            lambda f: f["kind"] == "run.paused" and f["run_id"] == self.run_id, timeout=60
        )
        self.gates = [
            f["data"]["approval_id"]
            for f in self.client.events()
            if f["kind"] == "approval.requested" and f["run_id"] == self.run_id
        ]

    async def decide(self, approval_id: str) -> None:
        began = time.perf_counter()
        frame = {"type": "decide", "approval_id": approval_id, "decision": "approve"}
        reply = await self.client.request(frame, timeout=60)
        assert reply["type"] == "decide_ok", reply
        self.decide_ms = (time.perf_counter() - began) * 1000

    async def finished(self) -> None:
        await self.client.wait_event(
            lambda f: f["kind"] == "run.finished" and f["run_id"] == self.run_id, timeout=120
        )


async def _steps(server, runs: int, gates: int, tag: str) -> list[Step]:
    User = get_user_model()
    steps = []
    for i in range(runs):
        user, _ = User.objects.get_or_create(username=f"gs{i}")
        session = await asyncio.to_thread(create_session, user, f"gate step {tag} {i}")
        client = await WsClient.connect(server.ws, session_cookie(user))
        assert (await client.resume(session.id, 0))["type"] == "resume_ok"
        steps.append(Step(client))
    await asyncio.gather(*(s.park(f"{tag}{i}", gates) for i, s in enumerate(steps)))
    for s in steps:  # every gate but the last decided
        for approval_id in s.gates[:-1]:
            await s.decide(approval_id)
    return steps


def _latency_ms(step: Step) -> float:
    """From the last decision's commit to the step's first call started."""
    rows = ApprovalRequest.objects.filter(run_id=step.run_id)
    decided = max(rows.values_list("decided_at", flat=True))
    started = min(r for r in rows.values_list("executed_at", flat=True) if r is not None)
    return (started - decided).total_seconds() * 1000


async def _measure(server, args, tag: str, burst: bool) -> tuple[list[float], list[float]]:
    steps = await _steps(server, args.runs, args.gates, tag)
    if burst:
        await asyncio.gather(*(s.decide(s.gates[-1]) for s in steps))
        await asyncio.gather(*(s.finished() for s in steps))
    else:
        for s in steps:
            await s.decide(s.gates[-1])
            await s.finished()
    latencies = [await asyncio.to_thread(_latency_ms, s) for s in steps]
    for s in steps:
        await s.client.close()
    return latencies, [s.decide_ms for s in steps]


def _line(name: str, values: list[float]) -> str:
    return (
        f"{name}: p50 {percentile(values, 0.5):.1f} ms, p99 {percentile(values, 0.99):.1f} ms, "
        f"max {max(values):.1f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--gates", type=int, default=4, help="1: a single gate (/write)")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(profile_line())
    env = {"AGENT_TEST_HOOKS": "0", "AGENT_USER_MAX_RUNS": "0"}
    server, procs = start_servers(Path(tempfile.mkdtemp(prefix="agent-bench-logs-")), **env)
    try:
        quiet, quiet_rtt = await _measure(server, args, "q", burst=False)
        burst, burst_rtt = await _measure(server, args, "b", burst=True)
    finally:
        for p in procs:
            p.stop()
    print(f"{args.runs} runs, each a step of {args.gates} gated writes")
    print(_line("one by one: last decision to first tool started", quiet))
    print(_line("one by one: the last decide's round trip", quiet_rtt))
    print(_line("at once: last decision to first tool started", burst))
    print(_line("at once: the last decide's round trip", burst_rtt))
    emit(
        "gate_step",
        runs=args.runs,
        gates=args.gates,
        quiet_p50_ms=percentile(quiet, 0.5),
        quiet_p99_ms=percentile(quiet, 0.99),
        burst_p50_ms=percentile(burst, 0.5),
        burst_p99_ms=percentile(burst, 0.99),
    )


if __name__ == "__main__":
    asyncio.run(main())
