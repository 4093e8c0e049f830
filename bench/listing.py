"""The session list and a branch switch at scale: one session of 20,000 runs
and 2,000 gates (and, for the switch, 20,000 runs in 400 branches of 50).

Times, in the process (no server: these are the queries' costs), the list's
summary of that session (``log.sessions.session_summary``, what every push
to a list socket reads), the user's whole list (``summaries``, what the page
and a list socket's snapshot read), and ``runtime.turns.switch`` between two
branches; prints the median and the worst of ``--repeat``.

    .venv/bin/python bench/listing.py                       # embedded (SQLite)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench .venv/bin/python bench/listing.py
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import time

import django_setup  # noqa: E402, F401 (sets up Django)
from common import emit, profile_line  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from sessions_app.log.sessions import create_session, session_summary, summaries  # noqa: E402
from sessions_app.models import AgentSession  # noqa: E402
from sessions_app.runtime import turns  # noqa: E402
from tests.log.test_sessions import _crowded as crowded  # noqa: E402
from tests.runtime.test_turns_scale import _long as branched  # noqa: E402

TAG = secrets.token_hex(3)  # ids of this run's rows: the database may hold an earlier run's


def timed(fn, repeat: int) -> tuple[float, float]:
    fn()  # warm
    ms = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - began) * 1e3)
    return statistics.median(ms), max(ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--gates", type=int, default=2_000)
    parser.add_argument("--sessions", type=int, default=50, help="other sessions of the user")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username=f"bench-list-{time.time_ns()}")
    s = crowded(user, args.runs, args.gates, 1, 2, f"c{TAG}")
    for i in range(args.sessions):
        create_session(user, f"other {i}")
    tree, firsts = branched(user, args.runs // 50, 50, f"b{TAG}")
    if connection.vendor == "postgresql":
        # Rows made in bulk have no statistics until autovacuum's next
        # analyze; a table that grew a turn at a time has them.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE sessions_app_run, sessions_app_approvalrequest")
    print(profile_line())
    summary = timed(lambda: session_summary(s.id, user.pk), args.repeat)
    page = timed(lambda: summaries(AgentSession.objects.filter(owner=user), 201), args.repeat)
    flip = iter(firsts * (args.repeat + 2))
    switch = timed(lambda: turns.switch(tree.id, next(flip)), args.repeat)
    print(f"one session of {args.runs:,} runs and {args.gates:,} gates, median / worst ms:")
    print(f"  its list summary (a push):     {summary[0]:8.2f} / {summary[1]:8.2f}")
    print(f"  the user's list ({args.sessions + 2} sessions): {page[0]:8.2f} / {page[1]:8.2f}")
    print(f"  a switch, {args.runs:,} runs in branches of 50: {switch[0]:8.2f} / {switch[1]:8.2f}")
    emit("listing", summary_ms=summary[0], list_ms=page[0], switch_ms=switch[0])


if __name__ == "__main__":
    main()
