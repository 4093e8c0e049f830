"""Benchmark: what telling people of waiting gates costs the sweeper.

Scenario: GATES pending gates of one owner (written straight to the
database), AGENT_NOTIFY on with a hook that does nothing. Then, each a
``notify_waiting_gates()`` pass, the read every sweep makes (every
``AGENT_SWEEP_SECONDS`` in every run-executing process):

- ``none due``: every gate younger than the delay;
- ``owner looking``: every gate due, but the owner has a visible tab, so
  none is told and every one is read again next pass (the worst case);
- ``telling``: the owner's tab hidden, one pass claims and hands on a
  batch (``notify.BATCH``).

    .venv/bin/python bench/gate_notices.py                       # SQLite
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/gate_notices.py
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

import django_setup  # noqa: E402, F401 (sets up Django)
from common import emit, percentile, profile_line  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import ApprovalRequest, Connection, Run  # noqa: E402
from sessions_app.runtime import notify  # noqa: E402


def ignore(notice: notify.Notice) -> None:
    """The hook: told, nothing done."""


def _gates(n: int, tag: str):
    user, _ = get_user_model().objects.get_or_create(username=f"gn-bench-{tag}")
    session = create_session(user, f"notices {tag}")
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
    ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            session=session,
            run=run,
            tool_call_id=f"call_{tag}{i}",
            tool="write_file",
            args={"path": "d.txt", "text": "x"},
        )
        for i, run in enumerate(made)
    )
    return user, ApprovalRequest.objects.filter(session=session)


def _passes(count: int, expect: int | None = None) -> list[float]:
    took = []
    for _ in range(count):
        began = time.perf_counter()
        told = notify.notify_waiting_gates()
        took.append((time.perf_counter() - began) * 1000)
        assert expect is None or len(told) == expect, len(told)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gates", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=50)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(profile_line())
    settings.AGENT_NOTIFY = ["gate_notices.ignore"]
    settings.AGENT_PUBLIC_URL = "https://agents.example.com"
    tag = f"n{int(time.time())}-"
    user, gates = _gates(args.gates, tag)
    idle = _passes(args.passes, expect=0)
    gates.update(created_at=timezone.now() - timedelta(minutes=10))
    tab = Connection.objects.create(user=user, visible=True)
    looking = _passes(args.passes, expect=0)
    Connection.objects.filter(id=tab.id).update(visible=False)
    telling = _passes(1, expect=notify.BATCH)[0]
    notify.drain(60)
    print(f"{args.gates:,} pending gates of one owner, notices on")
    for name, took in (("none due", idle), ("owner looking", looking)):
        print(f"{name}: p50 {percentile(took, 0.5):.2f} ms, p99 {percentile(took, 0.99):.2f} ms")
    print(f"telling: {notify.BATCH} gates claimed and handed on in {telling:.0f} ms")
    emit(
        "gate_notices",
        gates=args.gates,
        idle_p50_ms=percentile(idle, 0.5),
        looking_p50_ms=percentile(looking, 0.5),
        looking_p99_ms=percentile(looking, 0.99),
        telling_ms=telling,
    )


if __name__ == "__main__":
    main()
