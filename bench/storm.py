"""Benchmark: a reconnect storm. Every tab of a server comes back at once.

SOCKETS sockets follow SESSIONS sessions (four per session, one user per
session, each log a few runs long). All of them resume at the same moment at
a cursor a few events behind head, as after a server restart. Each socket is
a client with the browser's policy: on any close but 4400/4401 it retries
with jittered exponential backoff. Prints the time until every socket had
its missed events (and the per-socket p50/p99), the closes by code, the
retries, and whether any socket saw a close its client treats as final.

    .venv/bin/python bench/storm.py --sockets 2000            # embedded, one daphne
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/storm.py --sockets 2000

The client runs in this process, on the same two cores as the server:
compare figures within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import resource
import tempfile
import time
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
import websockets  # noqa: E402
from common import percentile, profile_line  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from sessions_app.models import AgentSession, Event  # noqa: E402
from sessions_app.services import create_session  # noqa: E402
from tests.harness import Daphne, session_cookie  # noqa: E402

FINAL = {4400, 4401}
BEHIND = 3  # events each socket missed


def _sessions(n: int, length: int):
    """``n`` sessions (one user each) with ``length`` events; their cookies."""
    User = get_user_model()
    out = []
    now = timezone.now()
    for i in range(n):
        user, _ = User.objects.get_or_create(username=f"storm{i}")
        s = create_session(user, f"storm {i}")
        Event.objects.bulk_create(
            Event(
                session=s,
                seq=seq,
                kind="assistant.delta",
                data={"text": f"t{seq} "},
                created_at=now,
            )
            for seq in range(2, length + 1)
        )
        AgentSession.objects.filter(id=s.id).update(head=length)
        s.refresh_from_db()
        out.append((s, session_cookie(user)))
    return out


class StormClient:
    def __init__(self, server, session, cookie, rng):
        self.server, self.session, self.cookie, self.rng = server, session, cookie, rng
        self.closes: collections.Counter = collections.Counter()
        self.attempts = 0
        self.caught_up_at: float | None = None

    async def run(self, t0: float, deadline: float) -> None:
        failures = 0
        while self.caught_up_at is None and time.monotonic() < deadline:
            self.attempts += 1
            try:
                if await self._once(t0):
                    return
                failures += 1
            except (OSError, websockets.WebSocketException, TimeoutError):
                failures += 1
            # The browser client's backoff: full jitter, 0.5 s base, 30 s cap.
            await asyncio.sleep(self.rng.uniform(0, min(30.0, 0.5 * 2 ** min(failures, 6))))

    async def _once(self, t0: float) -> bool:
        ws = await websockets.connect(
            self.server.ws,
            origin=self.server.http,
            additional_headers={"Cookie": self.cookie},
            ping_interval=None,
            open_timeout=60,
            max_size=2**24,
        )
        head = self.session.head
        after = head - BEHIND
        try:
            await ws.send(
                json.dumps(
                    {
                        "type": "resume",
                        "protocol": 1,
                        "session_id": self.session.id,
                        "after": after,
                        "epoch": self.session.epoch,
                    }
                )
            )
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] == "resume_rejected":
                    self.closes["rejected:" + frame["reason"]] += 1
                    return False
                if frame["type"] == "event" and frame["seq"] >= head:
                    self.caught_up_at = time.monotonic() - t0
                    await ws.close()
                    return True
        except websockets.ConnectionClosed:
            pass
        self.closes[ws.close_code if ws.close_code is not None else 1006] += 1
        return False


async def storm(server, pairs, sockets: int, seed: int, timeout: float) -> dict:
    rng = random.Random(seed)
    clients = [
        StormClient(server, *pairs[i % len(pairs)], random.Random(rng.random()))
        for i in range(sockets)
    ]
    t0 = time.monotonic()
    await asyncio.gather(*(c.run(t0, t0 + timeout) for c in clients))
    done = [c.caught_up_at for c in clients if c.caught_up_at is not None]
    closes = sum((c.closes for c in clients), collections.Counter())
    return {
        "all": max(done) if len(done) == len(clients) else float("inf"),
        "caught_up": len(done),
        "p50": percentile(done, 0.5),
        "p99": percentile(done, 0.99),
        "closes": dict(sorted(closes.items(), key=str)),
        "retries": sum(c.attempts for c in clients) - len(clients),
        "final": sum(n for code, n in closes.items() if code in FINAL),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=2000)
    parser.add_argument("--per-session", type=int, default=4)
    parser.add_argument("--log", type=int, default=200, help="events in each session's log")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=None,
        help="daphne's --websocket_connect_timeout (its default: 5 s)",
    )
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    call_command("migrate", verbosity=0)
    print(profile_line(), flush=True)
    pairs = _sessions(max(1, args.sockets // args.per_session), args.log)
    log_dir = Path(tempfile.mkdtemp(prefix="agent-storm-"))
    server = Daphne(
        log_dir,
        connect_timeout=args.connect_timeout,
        AGENT_TEST_HOOKS="0",
        AGENT_USER_MAX_SOCKETS="100000",
    ).start()
    try:
        result = await storm(server, pairs, args.sockets, args.seed, args.timeout)
    finally:
        server.stop()
    print(
        f"{args.sockets} sockets over {len(pairs)} sessions resume at once, {BEHIND} events "
        f"behind: all caught up in {result['all']:.2f} s ({result['caught_up']} of "
        f"{args.sockets}); per socket p50 {result['p50']:.2f} s, p99 {result['p99']:.2f} s"
    )
    print(
        f"closes seen {result['closes']}; retries {result['retries']}; "
        f"closes the client treats as final: {result['final']}"
    )
    print(f"server log: {server.log_path}")


if __name__ == "__main__":
    asyncio.run(main())
