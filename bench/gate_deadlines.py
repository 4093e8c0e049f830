"""Benchmark: what gate deadlines cost the sweeper.

Scenario: GATES pending gates with deadlines (in sessions and runs of their
own, written straight to the database), none due. Then:

- ``idle pass``: one ``expire_due_gates()`` with nothing due, the read every
  sweep makes (every ``AGENT_SWEEP_SECONDS`` in every run-executing
  process): p50 and p99 over ``--passes`` passes;
- ``due pass``: ``--due`` of them made due, one pass decides them all
  ``expired`` (each its own short transaction: the decision, its event, its
  run continued): the pass's time and the time a gate.

The continuations are recorded, not run (``runs.enqueue`` is replaced for
this process): what is measured is the sweeper's part.

    .venv/bin/python bench/gate_deadlines.py                       # SQLite
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/gate_deadlines.py
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

import django_setup  # noqa: E402, F401 (sets up Django)
from common import emit, percentile, profile_line  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import ApprovalRequest, Run  # noqa: E402
from sessions_app.runtime import runs, sweeper  # noqa: E402


def _gates(n: int, tag: str) -> list[str]:
    """``n`` runs parked at a gate each, deadlines an hour away."""
    user, _ = get_user_model().objects.get_or_create(username="gd-bench")
    session = create_session(user, f"deadlines {tag}")
    later = timezone.now() + timedelta(hours=1)
    made = Run.objects.bulk_create(
        Run(
            session=session,
            client_message_id=f"{tag}{i}",
            text="/write d.txt x",
            message_seq=i + 1,
            status=Run.Status.AWAITING_APPROVAL,
            state={"gate": f"call_{tag}{i}"},
        )
        for i in range(n)
    )
    gates = ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            session=session,
            run=run,
            tool_call_id=f"call_{tag}{i}",
            tool="write_file",
            args={"path": "d.txt", "text": "x"},
            expires_at=later,
        )
        for i, run in enumerate(made)
    )
    return [g.id for g in gates]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gates", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--due", type=int, default=sweeper.EXPIRE_BATCH)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(profile_line())
    continued: list[str] = []
    runs.set_enqueue(continued.append)
    tag = f"g{int(time.time())}-"
    ids = _gates(args.gates, tag)
    idle = []
    for _ in range(args.passes):
        began = time.perf_counter()
        assert sweeper.expire_due_gates() == []
        idle.append((time.perf_counter() - began) * 1000)
    ApprovalRequest.objects.filter(id__in=ids[: args.due]).update(expires_at=timezone.now())
    began = time.perf_counter()
    expired = sweeper.expire_due_gates()
    due_ms = (time.perf_counter() - began) * 1000
    assert len(expired) == args.due and len(continued) == args.due, (len(expired), len(continued))
    print(f"{args.gates:,} pending gates with deadlines, none due")
    print(
        f"idle pass (the read every sweep makes): p50 {percentile(idle, 0.5):.2f} ms, "
        f"p99 {percentile(idle, 0.99):.2f} ms over {args.passes} passes"
    )
    print(
        f"due pass: {args.due} gates expired in {due_ms:.0f} ms "
        f"({due_ms / args.due:.2f} ms a gate, each decided, logged and its run continued)"
    )
    emit(
        "gate_deadlines",
        gates=args.gates,
        idle_p50_ms=percentile(idle, 0.5),
        idle_p99_ms=percentile(idle, 0.99),
        due=args.due,
        due_ms=due_ms,
    )


if __name__ == "__main__":
    main()
