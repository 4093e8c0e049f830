"""Benchmark: what idle sockets cost one daphne process in memory.

SOCKETS sockets follow SOCKETS/4 sessions (one user each, four tabs per
session, as `storm.py` sets them up) and resume at head, then stay open and
quiet. Prints the daphne's resident memory (VmRSS) before the first socket and
with all of them live, the cost per socket, and that every socket still
answers a ping at the end (none was dropped while idle).

    .venv/bin/python bench/idle.py --sockets 5000            # embedded
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/idle.py --sockets 5000

``--floor`` opens the same sockets on ``bench/floor_app.py`` (a bare daphne
application, no Django): what daphne, autobahn and asyncio cost a socket, which
no application on daphne can go below.

Targets: 5,000 idle sockets under 1 GiB RSS in one daphne (fast-path issue);
in 150 MiB (performance issue 31).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
import types
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
import floor as floor_server  # noqa: E402
import websockets  # noqa: E402
from common import SHIPPED_ARGS, emit, profile_line  # noqa: E402
from django.core.management import call_command  # noqa: E402
from storm import _sessions  # noqa: E402

from tests.harness import Daphne  # noqa: E402

CONNECT_AT_ONCE = 100


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def _open(server, session, cookie, gate: asyncio.Semaphore):
    """One socket resumed at head (retried on a close the server sheds load with)."""
    for attempt in range(20):
        async with gate:
            try:
                ws = await websockets.connect(
                    server.ws,
                    origin=server.http,
                    additional_headers={"Cookie": cookie},
                    ping_interval=None,
                    open_timeout=60,
                )
                await ws.send(
                    json.dumps(
                        {
                            "type": "resume",
                            "protocol": 1,
                            "session_id": session.id,
                            "after": session.head,
                            "epoch": session.epoch,
                        }
                    )
                )
                while True:
                    frame = json.loads(await ws.recv())
                    if frame["type"] == "resume_ok":
                        return ws
                    if frame["type"] == "resume_rejected":
                        raise RuntimeError(f"rejected: {frame}")
            except (OSError, websockets.WebSocketException, TimeoutError):
                # A retry's backoff.
                await asyncio.sleep(0.2 * (attempt + 1))  # sleep-ok: a retry's backoff
    raise RuntimeError("a socket could not be opened in 20 attempts")


async def _ping(ws, n: int) -> bool:
    await ws.send(json.dumps({"type": "ping", "request_id": f"idle-{n}"}))
    while True:
        frame = json.loads(await ws.recv())
        if frame.get("type") == "pong":
            return True


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=5000)
    parser.add_argument("--per-session", type=int, default=4)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds to stay idle")
    parser.add_argument("--floor", action="store_true", help="against bench/floor_app.py")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    n = max(1, args.sockets // args.per_session)
    if args.floor:
        print("floor: bench/floor_app.py on one daphne", flush=True)
        pairs = [
            (types.SimpleNamespace(id=f"storm-{i}", head=20, epoch="floor"), "") for i in range(n)
        ]
        server = await asyncio.to_thread(floor_server.serve)
    else:
        call_command("migrate", verbosity=0)
        print(profile_line(), flush=True)
        pairs = _sessions(n, 20)
        log_dir = Path(tempfile.mkdtemp(prefix="agent-idle-"))
        server = Daphne(
            log_dir, args=SHIPPED_ARGS, AGENT_TEST_HOOKS="0", AGENT_USER_MAX_SOCKETS="100000"
        ).start()
    pid = server.proc.pid
    sockets = []
    try:
        # Warm: one socket opened and closed, so imports and pools are counted in "before".
        first = await _open(server, *pairs[0], asyncio.Semaphore(1))
        await first.close()
        before = rss_mib(pid)
        gate = asyncio.Semaphore(CONNECT_AT_ONCE)
        t0 = time.monotonic()
        sockets = await asyncio.gather(
            *(_open(server, *pairs[i % len(pairs)], gate) for i in range(args.sockets))
        )
        opened = time.monotonic() - t0
        # Idle on purpose: that is what is measured.
        await asyncio.sleep(args.idle)  # sleep-ok: idle is what is measured
        after = rss_mib(pid)
        alive = await asyncio.gather(*(_ping(ws, n) for n, ws in enumerate(sockets)))
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
        server.stop()
    per = (after - before) * 1024 / args.sockets
    print(
        f"{args.sockets} idle sockets over {len(pairs)} sessions (opened in {opened:.1f} s, "
        f"idle {args.idle:g} s): daphne RSS {before:.0f} MiB before, {after:.0f} MiB with "
        f"all open: +{per:.1f} KiB per socket; {sum(alive)} of {args.sockets} answered a ping "
        f"after idling"
    )
    emit(
        "idle_floor" if args.floor else "idle",
        sockets=args.sockets,
        kib_per_socket=per,
        rss_mib=after,
        alive=sum(alive),
    )


if __name__ == "__main__":
    asyncio.run(main())
