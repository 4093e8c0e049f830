"""Benchmark: a reconnect storm. Every tab of a server comes back at once.

SOCKETS sockets follow SESSIONS sessions (four per session, one user per
session, each log a few runs long). All of them resume at the same moment at
a cursor a few events behind head, as after a server restart. Each socket is
a client with the browser's policy: on any close but 4400/4401 it retries
with jittered exponential backoff. Prints the time until every socket had
its missed events (and the per-socket p50/p99), the closes by code, the
retries, and whether any socket saw a close its client treats as final.

With ``--restart`` it measures a real restart instead: every socket attaches
and follows its session, then the daphne gets SIGTERM (it closes its sockets
with 1012), a new daphne starts on the same port, and the clients come back
with their own backoff, resuming at the last seq they had. Prints how long
the old server took to stop, how long until every socket was live again
(``resume_ok`` on the new server), the closes and the retries.

    .venv/bin/python bench/storm.py --sockets 2000            # embedded, one daphne
    .venv/bin/python bench/storm.py --sockets 2000 --restart
    .venv/bin/python bench/storm.py --sockets 2000 --floor

``--floor`` runs the same storm against ``bench/floor_app.py`` on one daphne:
no database, no auth, no channel layer, only the upgrade and the frames. It is
the least a daphne process needs for this storm on this machine.
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
import sys
import tempfile
import time
import types
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
import floor as floor_server  # noqa: E402
import websockets  # noqa: E402
from common import SHIPPED_ARGS, emit, percentile, profile_line, py_spy  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from sessions_app.models import AgentSession  # noqa: E402
from tests.harness import LISTEN_BACKLOG, Daphne, listen_overflows, session_cookie  # noqa: E402
from tests.logs_made import session_with_deltas  # noqa: E402

FINAL = {4400, 4401}
BEHIND = 3  # events each socket missed


def _sessions(n: int, length: int):
    """``n`` sessions (one user each) with ``length`` events; their cookies."""
    User = get_user_model()
    out = []
    for i in range(n):
        user, _ = User.objects.get_or_create(username=f"storm{i}")
        done = AgentSession.objects.filter(owner=user, title=f"storm {i}", head=length).first()
        if done:  # built before in this database (bench/ab.py keeps it across runs)
            out.append((done, session_cookie(user)))
            continue
        out.append((session_with_deltas(user, length, f"storm {i}"), session_cookie(user)))
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
            await asyncio.sleep(self.backoff(failures))

    def backoff(self, failures: int) -> float:
        """The browser client's delay (static/sessions_app/js/client/backoff.js): full jitter over
        [0, min(10 s, 0.25 s * 2^(n-1))) before the n-th retry."""
        return self.rng.uniform(0, min(10.0, 0.25 * 2 ** min(failures - 1, 10)))

    async def _open(self, after: int):
        """A socket of this client's cookie that sent ``resume`` at ``after``."""
        ws = await websockets.connect(
            self.server.ws,
            origin=self.server.http,
            additional_headers={"Cookie": self.cookie},
            ping_interval=None,
            open_timeout=60,
            max_size=2**24,
        )
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
        return ws

    async def _once(self, t0: float) -> bool:
        head = self.session.head
        ws = await self._open(head - BEHIND)
        try:
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


class Follower(StormClient):
    """A tab that stays: follows its session, and after any close but a final
    one comes back with the browser's backoff, resuming at the last seq it had.
    ``live_at`` is when its latest connection got ``resume_ok``."""

    def __init__(self, *args, on_live):
        super().__init__(*args)
        self.cursor = self.session.head
        self.live_at: float | None = None
        self.on_live = on_live
        self.stopping = False

    async def follow(self) -> None:
        failures = 0
        while not self.stopping:
            self.attempts += 1
            try:
                if await self._connection():
                    failures = 0
                    continue  # closed after it was live: a fresh outage
                failures += 1
            except (OSError, websockets.WebSocketException, TimeoutError):
                failures += 1
            if self.stopping or any(code in FINAL for code in self.closes):
                return
            await asyncio.sleep(self.backoff(max(failures, 1)))

    async def _connection(self) -> bool:
        """One connection until it closes; True if it was live."""
        ws = self.ws = await self._open(self.cursor)
        live = False
        try:
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] == "resume_ok":
                    live = True
                    self.live_at = time.monotonic()
                    self.on_live(self)
                elif frame["type"] == "event":
                    self.cursor = frame["seq"]
                elif frame["type"] == "resume_rejected":
                    self.closes["rejected:" + frame["reason"]] += 1
                    self.stopping = True
        except websockets.ConnectionClosed:
            pass
        if not self.stopping:
            self.closes[ws.close_code if ws.close_code is not None else 1006] += 1
        return live


async def restart(server, pairs, sockets: int, seed: int, timeout: float) -> dict:
    """Attach every socket, SIGTERM the server, start a new one on its port,
    and time until every socket is live again."""
    rng = random.Random(seed)
    counted: set[int] = set()
    since = [0.0]
    everyone = asyncio.Event()

    def live(client) -> None:
        if client.live_at >= since[0]:
            counted.add(id(client))
            if len(counted) == sockets:
                everyone.set()

    clients = [
        Follower(server, *pairs[i % len(pairs)], random.Random(rng.random()), on_live=live)
        for i in range(sockets)
    ]
    t0 = since[0] = time.monotonic()
    tasks = [asyncio.ensure_future(c.follow()) for c in clients]
    await asyncio.wait_for(everyone.wait(), timeout)
    attached = time.monotonic() - t0
    before = sum((c.closes for c in clients), collections.Counter())
    attempts_before = sum(c.attempts for c in clients)
    counted.clear()
    everyone.clear()
    t_term = since[0] = time.monotonic()
    await asyncio.to_thread(server.stop)  # SIGTERM; waits for the process to exit
    stopped = time.monotonic() - t_term
    await asyncio.to_thread(server.start_again)
    up = time.monotonic() - t_term
    try:
        await asyncio.wait_for(everyone.wait(), timeout)
        back = time.monotonic() - t_term
    except TimeoutError:
        back = float("inf")
    for c in clients:
        c.stopping = True
        if getattr(c, "ws", None) is not None:
            await c.ws.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    closes = sum((c.closes for c in clients), collections.Counter()) - before
    return {
        "attached": attached,
        "stopped": stopped,
        "up": up,
        "back": back,
        "live": len(counted),
        "closes": dict(sorted(closes.items(), key=str)),
        "retries": sum(c.attempts for c in clients) - attempts_before - sockets,
        "final": sum(n for code, n in closes.items() if code in FINAL),
    }


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


async def floor(args) -> None:
    """The storm against the bare daphne application of ``bench/floor_app.py``."""
    n = max(1, args.sockets // args.per_session)
    pairs = [
        (types.SimpleNamespace(id=f"storm-{i}", head=args.log, epoch="floor"), "") for i in range(n)
    ]
    server = await asyncio.to_thread(floor_server.serve)
    try:
        result = await storm(server, pairs, args.sockets, args.seed, args.timeout)
    finally:
        await asyncio.to_thread(server.stop)
    print(
        f"floor: {args.sockets} sockets over {n} sessions resume at once, {BEHIND} events "
        f"behind: all caught up in {result['all']:.2f} s ({result['caught_up']} of "
        f"{args.sockets}); per socket p50 {result['p50']:.2f} s, p99 {result['p99']:.2f} s"
    )
    print(f"closes seen {result['closes']}; retries {result['retries']}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=2000)
    parser.add_argument("--per-session", type=int, default=4)
    parser.add_argument("--log", type=int, default=200, help="events in each session's log")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--restart", action="store_true", help="SIGTERM and restart the server")
    parser.add_argument("--floor", action="store_true", help="against bench/floor_app.py")
    parser.add_argument("--py-spy", metavar="OUT", help="record the daphne (bench/stacks.py)")
    parser.add_argument(
        "--backlog",
        type=int,
        default=LISTEN_BACKLOG,
        help="daphne's listen backlog (what -b/-p give: 50)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=None,
        help="daphne's --websocket_connect_timeout (its default: 5 s)",
    )
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.floor:
        await floor(args)
        return
    call_command("migrate", verbosity=0)
    print(profile_line(), flush=True)
    pairs = _sessions(max(1, args.sockets // args.per_session), args.log)
    log_dir = Path(tempfile.mkdtemp(prefix="agent-storm-"))
    server = Daphne(
        log_dir,
        connect_timeout=args.connect_timeout,
        backlog=args.backlog,
        args=SHIPPED_ARGS,
        AGENT_TEST_HOOKS="0",
        AGENT_USER_MAX_SOCKETS="100000",
    ).start()
    if args.restart:
        try:
            result = await restart(server, pairs, args.sockets, args.seed, args.timeout)
        finally:
            server.stop()
        print(
            f"{args.sockets} sockets over {len(pairs)} sessions attached in "
            f"{result['attached']:.2f} s; after SIGTERM the server stopped in "
            f"{result['stopped']:.2f} s, the new one listened at {result['up']:.2f} s, and "
            f"{result['live']} of {args.sockets} were live again at {result['back']:.2f} s"
        )
        print(
            f"closes seen {result['closes']}; retries {result['retries']}; "
            f"closes the client treats as final: {result['final']}"
        )
        print(f"server log: {server.log_path}")
        return
    overflows = listen_overflows()
    try:
        with py_spy(server.proc.pid, args.py_spy):
            result = await storm(server, pairs, args.sockets, args.seed, args.timeout)
    finally:
        server.stop()
    overflows = listen_overflows() - overflows
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
    # Connections the kernel dropped from a full accept queue: their clients
    # wait on SYN retransmission (1, 3, 7, 15 s...), never seen by the server.
    print(f"kernel listen overflows during the storm: {overflows} (backlog {args.backlog})")
    emit("storm", sockets=args.sockets, all_s=result["all"], p99_s=result["p99"], drops=overflows)
    if overflows:
        sys.exit(f"FAIL: {overflows} connections dropped by the kernel's accept queue")


if __name__ == "__main__":
    asyncio.run(main())
