"""Capacity of one component at a time, for docs/scaling.md.

- ``appends``: events a second PostgreSQL takes from THREADS writers, each a
  run appending one event at a time to its own session, with group commit
  (the runtime's path, ``log.group_commit``) and without it;
- ``redis``: channel-layer messages a second through Redis, published the way
  the fan-out publishes (``group_send_many``, batches of BATCH, one group per
  session, each with one follower) and received by those followers.

Sockets and handshakes a second for one daphne come from ``bench/storm.py``;
runs and appends a second for one worker from ``bench/concurrent_runs.py``
(docs/scaling.md names the commands). One process's writers share its GIL:
run two at once (``--part appends``) to see what PostgreSQL takes from
several. Production profile only:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/components.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import threading
import time

import django_setup  # noqa: E402, F401 (sets up Django)
from common import profile_line  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import close_old_connections, connection  # noqa: E402

from sessions_app.log.group_commit import append_event  # noqa: E402
from sessions_app.log.sessions import create_session  # noqa: E402


def appends(threads: int, seconds: float, group: bool) -> float:
    """Events a second appended by ``threads`` writers for ``seconds``."""
    from django.conf import settings

    settings.AGENT_GROUP_COMMIT = group
    user, _ = get_user_model().objects.get_or_create(username="bench-components")
    sessions = [create_session(user).id for _ in range(threads)]
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def writer(i: int) -> None:
        try:
            start.wait()
            while not stop.is_set():
                append_event(sessions[i], "assistant.delta", {"text": "tok "}, None, guard=None)
                counts[i] += 1
        finally:
            close_old_connections()

    pool = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)  # the measurement's length, not a synchronisation
    stop.set()
    for t in pool:
        t.join()
    return sum(counts) / (time.perf_counter() - began)


async def redis(groups: int, batch: int, seconds: float) -> tuple[float, float]:
    """Messages a second sent (group_send_many, ``batch`` a call) and received
    by one follower per group, for ``seconds``."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channels = []
    for g in range(groups):
        channel = await layer.new_channel()
        await layer.group_add(f"bench.g{g}", channel)
        channels.append(channel)
    received = 0
    target: int | None = None
    done, caught = asyncio.Event(), asyncio.Event()

    async def follow(channel: str) -> None:
        nonlocal received
        while not done.is_set():
            try:
                await asyncio.wait_for(layer.receive(channel), 0.5)
            except TimeoutError:
                continue
            received += 1
            if target is not None and received >= target:
                caught.set()

    followers = [asyncio.ensure_future(follow(c)) for c in channels]
    sent = 0
    began = time.perf_counter()
    message = {"type": "session.event", "seq": 1, "text": '{"type":"event"}' * 8}
    while time.perf_counter() - began < seconds:
        items = [(f"bench.g{(sent + i) % groups}", message) for i in range(batch)]
        await layer.group_send_many(items)
        sent += batch
    elapsed = time.perf_counter() - began
    # What was sent and is still on its way is received, up to a second more.
    target = sent
    if received < sent:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(caught.wait(), 1.0)
    done.set()
    for f in followers:
        f.cancel()
    return sent / elapsed, received / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", default="8,32", help="writers for the appends")
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--part", choices=("appends", "redis", "both"), default="both")
    args = parser.parse_args()
    if connection.vendor != "postgresql" or not os.environ.get("REDIS_URL"):
        raise SystemExit("the production profile only: set DATABASE_URL (postgres) and REDIS_URL")
    call_command("migrate", verbosity=0)
    print(profile_line())
    for threads in (int(t) for t in args.threads.split(",")) if args.part != "redis" else ():
        for group in (True, False):
            rate = appends(threads, args.seconds, group)
            mode = "group commit" if group else "one commit each"
            print(f"appends: {threads:>3} writers, {mode:<15} {rate:>9,.0f} events/s", flush=True)
    if args.part == "appends":
        return
    sent, got = asyncio.run(redis(args.groups, args.batch, args.seconds))
    print(
        f"redis: {args.groups} groups, group_send_many of {args.batch}: "
        f"{sent:,.0f} messages/s sent, {got:,.0f} received",
        flush=True,
    )


if __name__ == "__main__":
    main()
