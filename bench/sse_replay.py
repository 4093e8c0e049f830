"""Replaying a session's log over the SSE stream (``GET /api/sessions/<id>/stream/``).

Builds a session of about 10k events (``/stream 100 0`` turns, as
``fresh_open.py`` does), starts the server (one daphne; a run worker in the
production profile) and reads the whole log from ``?after=0`` with httpx,
until the event whose seq is the head: the time from the request to that
event, and the bytes received. Prints the median of ``--repeat`` reads.

    .venv/bin/python bench/sse_replay.py [--turns 96] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
import httpx  # noqa: E402
from common import emit, profile_line, start_servers  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from fresh_open import build_session  # noqa: E402

from tests.harness import session_cookie  # noqa: E402


def read_once(client: httpx.Client, url: str, head: int) -> tuple[float, int]:
    """Milliseconds from the request to the event ``head``, and bytes read."""
    t0 = time.perf_counter()
    received = 0
    last = f"id: {head}\n"
    with client.stream("GET", url, params={"after": 0}) as response:
        if response.status_code != 200:
            raise SystemExit(f"the stream answered {response.status_code}: {response.read()!r}")
        for chunk in response.iter_text():
            received += len(chunk)
            if last in chunk:
                return (time.perf_counter() - t0) * 1e3, received
    raise SystemExit(f"the stream ended before seq {head}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=96, help="turns of 104 events")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench-sse")
    sid, head = build_session(user, args.turns)
    log_dir = Path(tempfile.mkdtemp(prefix="agent-bench-sse-"))
    server, procs = start_servers(log_dir, AGENT_TEST_HOOKS="0")
    name, value = session_cookie(user).split("=", 1)
    print(profile_line())
    rows = []
    try:
        with httpx.Client(cookies={name: value}, timeout=60) as client:
            url = f"{server.http}/api/sessions/{sid}/stream/"
            read_once(client, url, head)  # warm: imports, pools, caches
            for _ in range(args.repeat):
                rows.append(read_once(client, url, head))
    finally:
        for proc in procs:
            proc.stop()
    ms = statistics.median(r[0] for r in rows)
    kib = statistics.median(r[1] for r in rows) / 1024
    print(f"SSE replay of {head} events: median {ms:.0f} ms over {args.repeat}, {kib:.0f} KiB")
    emit("sse_replay", events=head, replay_ms=ms)


if __name__ == "__main__":
    main()
