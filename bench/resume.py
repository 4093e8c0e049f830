"""Resume after K missed events, side by side with Socket.IO v4's connection-state recovery.

One run on this machine times how long a client takes to get back everything
it missed, on this project (the plain protocol, and the browser's ``batch``
path) and on Socket.IO 4.8 with ``connectionStateRecovery`` (the in-memory
anchor, ``bench/socketio/``), interleaved so that the machine's drift hits
all of them alike, and prints the ratio ours / Socket.IO per K.

    .venv/bin/python bench/resume.py [--ks 10,1000,10000] [--rounds 4] [--reps 2]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/resume.py

One trial, for K (the same on both sides; ``bench/socketio/bench.mjs`` says
Socket.IO's): an idle pause (``--settle-ms``), then t0; open a new WebSocket
(TCP, the upgrade with the cookie and Origin checks), send ``resume`` at
``head - K``; ``done_ms`` when the K-th missed event arrives (every seq
checked: contiguous, no repeat). The missed events are the tail of a log of
``/stream 100 0`` turns on both sides (same kinds, same sizes). Our client is
Python (``websockets``), Socket.IO's is Node (``socket.io-client``): the
comparison the project has always recorded. Socket.IO's packages are
installed into ``.tools/socketio`` (ignored by git) on first use.

``--floor`` adds ``bench/floor_app.py`` (a bare daphne application: no
Django, no database, no auth, the log in a dict) to the rotation, measured
with our client, plain frames: the least any server on daphne can take, so
the ratio that ours could at best reach on this machine (``floor_k…_ratio``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
import floor as floor_server  # noqa: E402
import websockets  # noqa: E402
from common import emit, profile_line, py_spy, start_servers  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from fresh_open import TURN_EVENTS, build_session  # noqa: E402

from sessions_app.models import AgentSession  # noqa: E402
from tests.harness import ROOT, session_cookie  # noqa: E402

SIO = ROOT / "bench" / "socketio"
SIO_PREFIX = Path(os.environ.get("PERF_SIO_PREFIX") or ROOT / ".tools" / "socketio")
MODES = {"plain": [], "batch": ["batch"]}  # our handshake features per mode


def install_socketio() -> None:
    """socket.io and its client, pinned by bench/socketio/package.json."""
    if (SIO_PREFIX / "node_modules" / "socket.io" / "package.json").exists():
        return
    SIO_PREFIX.mkdir(parents=True, exist_ok=True)
    (SIO_PREFIX / "package.json").write_text((SIO / "package.json").read_text())
    subprocess.run(
        ["npm", "install", "--prefix", str(SIO_PREFIX), "--no-audit", "--no-fund", "--silent"],
        check=True,
    )


class SocketIO:
    """``bench/socketio/server.mjs`` on a free loopback port, and its client bench."""

    def __init__(self, log_dir: Path):
        env = {**os.environ, "PERF_SIO_PREFIX": str(SIO_PREFIX)}
        self.env = env
        self.log = open(log_dir / "socketio.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            ["node", str(SIO / "server.mjs"), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            text=True,
        )
        ready = json.loads(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{ready['port']}"

    def measure(self, k: int, reps: int, warmup: int, settle_ms: float, jsonl: Path) -> list[float]:
        before = jsonl.read_text().count("\n") if jsonl.exists() else 0
        subprocess.run(
            ["node", str(SIO / "bench.mjs"), "--url", self.url, "--ks", str(k)]
            + ["--reps", str(reps), "--warmup", str(warmup), "--chunk", "100"]
            + ["--settle-ms", str(settle_ms), "--jsonl", str(jsonl), "--no-table"],
            check=True,
            env=self.env,
            stdout=subprocess.DEVNULL,
        )
        rows = jsonl.read_text().splitlines()[before:]
        return [json.loads(r)["done_ms"] for r in rows]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


async def trial(server, cookie: str, session: dict, k: int, features, settle_ms: float) -> float:
    """One resume of the last ``k`` events; milliseconds to the k-th."""
    head = session["head"]
    after = head - k
    frame = {
        "type": "resume",
        "protocol": 1,
        "request_id": "r-resume",
        "session_id": session["id"],
        "after": after,
        "epoch": session["epoch"],
    }
    if features:
        frame["features"] = features
    await asyncio.sleep(settle_ms / 1000)  # sleep-ok: the outage's idle pause, both sides
    t0 = time.perf_counter()
    ws = await websockets.connect(
        server.ws,
        origin=server.http,
        additional_headers={"Cookie": cookie},
        compression=None,
        max_size=1 << 24,
        ping_interval=None,
        max_queue=None,
    )
    try:
        await ws.send(json.dumps(frame))
        expected = after + 1
        while expected <= head:
            msg = json.loads(await ws.recv())
            frames = msg["frames"] if msg.get("type") == "batch" else [msg]
            for f in frames:
                if f["type"] in ("resume_rejected", "error"):
                    raise SystemExit(f"resume refused: {f}")
                if f["type"] != "event":
                    continue
                if f["seq"] != expected:
                    raise SystemExit(f"K={k}: seq {f['seq']} where {expected} was expected")
                expected += 1
        return (time.perf_counter() - t0) * 1e3
    finally:
        await ws.close()


async def floor_session(server, events: int) -> dict:
    """A session of ``events`` events on the floor's daphne (``/stream`` turns
    of 100 deltas, as ours)."""
    async with websockets.connect(server.ws, max_size=1 << 24, ping_interval=None) as ws:
        await ws.send(json.dumps({"type": "start", "protocol": 1, "request_id": "s"}))
        started = json.loads(await ws.recv())
        head = 0
        while head < events:
            await ws.send(json.dumps({"type": "send", "text": "/stream 100 0", "request_id": "t"}))
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("kind") == "run.finished":
                    head = frame["seq"]
                    break
    return {"id": started["session_id"], "head": head, "epoch": started["epoch"]}


async def measure_ours(server, cookie, session, k, features, reps, warmup, settle_ms):
    out = []
    for i in range(warmup + reps):
        ms = await trial(server, cookie, session, k, features, settle_ms)
        if i >= warmup:
            out.append(ms)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", default="10,1000,10000")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--reps", type=int, default=2, help="timed trials per side, K and round")
    parser.add_argument("--warmup", type=int, default=1, help="untimed trials before each batch")
    parser.add_argument("--settle-ms", type=float, default=20.0)
    parser.add_argument("--modes", default="plain,batch", help="ours: plain, batch or both")
    parser.add_argument("--py-spy", metavar="OUT", help="record the daphne (bench/stacks.py)")
    parser.add_argument("--floor", action="store_true", help="add bench/floor_app.py")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    modes = args.modes.split(",")
    install_socketio()
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench-resume")
    sid, head = build_session(user, max(ks) // TURN_EVENTS + 1)
    session = {"id": sid, "head": head, "epoch": AgentSession.objects.get(id=sid).epoch}
    log_dir = Path(tempfile.mkdtemp(prefix="agent-bench-resume-"))
    server, procs = start_servers(log_dir, AGENT_TEST_HOOKS="0", AGENT_USER_MAX_SOCKETS="10000")
    sio = SocketIO(log_dir)
    floor = None
    cookie = session_cookie(user)
    jsonl = log_dir / "socketio.jsonl"
    print(profile_line())
    times: dict[tuple[str, int], list[float]] = {}
    try:
        if args.floor:
            floor = await asyncio.to_thread(floor_server.serve)
            floor.session = await floor_session(floor, head)
        for mode in modes:  # pre-warm: pools, caches, the first replay's imports
            await measure_ours(server, cookie, session, min(1000, head), MODES[mode], 3, 0, 0)
        impls = ["socketio", *modes, *(["floor"] if floor else [])]
        batch = 0
        with py_spy(server.proc.pid, args.py_spy):
            for _ in range(args.rounds):
                for k in ks:
                    order = impls[batch % len(impls) :] + impls[: batch % len(impls)]
                    batch += 1
                    for impl in order:
                        if impl == "socketio":
                            got = sio.measure(k, args.reps, args.warmup, args.settle_ms, jsonl)
                        elif impl == "floor":
                            got = await measure_ours(
                                floor, "", floor.session, k, [], args.reps, args.warmup,
                                args.settle_ms,
                            )  # fmt: skip
                        else:
                            got = await measure_ours(
                                server,
                                cookie,
                                session,
                                k,
                                MODES[impl],
                                args.reps,
                                args.warmup,
                                args.settle_ms,
                            )
                        times.setdefault((impl, k), []).extend(got)
    finally:
        sio.stop()
        if floor is not None:
            floor.stop()
        for proc in procs:
            proc.stop()
    print(f"resume after K missed events, median ms over {args.rounds} rounds x {args.reps}")
    shown = [*modes, *(["floor"] if floor else [])]
    print(f"{'K':>6} {'socket.io':>10} " + " ".join(f"{m:>8} {'ratio':>6}" for m in shown))
    figures = {}
    for k in ks:
        sio_ms = statistics.median(times[("socketio", k)])
        cells = []
        for mode in shown:
            ms = statistics.median(times[(mode, k)])
            figures[f"{mode}_k{k}_ratio"] = ms / sio_ms
            figures[f"{mode}_k{k}_ms"] = ms
            cells.append(f"{ms:>8.1f} {ms / sio_ms:>6.2f}")
        print(f"{k:>6} {sio_ms:>10.1f} " + " ".join(cells))
    emit("resume", events=head, **figures)


if __name__ == "__main__":
    asyncio.run(main())
