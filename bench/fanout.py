"""Benchmark: live fan-out to the followers of one session.

One session followed by F sockets (plain v1 frames); a run streams N deltas
MS milliseconds apart. For each F, prints the latency from append (the
event's ``ts``, the server's clock, the same machine) to receipt at each
follower: p50, p99 and max over every delta at every follower, and the
frames per second the server delivered. Gaps and duplicates are counted too.

    .venv/bin/python bench/fanout.py --followers 10,30,100 --stream "200 30"
    .venv/bin/python bench/fanout.py --followers 100,200,400,600 --plot docs/fanout.png
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/fanout.py

The clients run in this process, on the same cores as the server: compare
figures within one run. ``--plot FILE`` draws p50 and p99 against the
followers (``bench/plots.py``; needs matplotlib, the ``bench`` extra); with
``--plot-json FILE`` the rows are also kept in (and earlier rows of the other
profile read from) a JSON file, so one plot shows both profiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
from common import emit, percentile, profile_line, start_servers  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from tests.harness import WsClient, session_cookie  # noqa: E402


def _ts(frame) -> float:
    return datetime.fromisoformat(frame["ts"].replace("Z", "+00:00")).timestamp()


async def one(server, cookie, followers: int, stream: str, label: str) -> dict:
    writer = await WsClient.connect(server.ws, cookie)
    ok = await writer.start()
    socks = []
    for _ in range(followers):
        c = await WsClient.connect(server.ws, cookie)
        await c.resume(ok["session_id"], 0)
        socks.append(c)
    t_send = time.time()
    sent = await writer.request(
        {"type": "send", "client_message_id": label, "text": f"/stream {stream}"}
    )
    for c in socks:
        await c.wait_event(
            lambda f, r=sent["run_id"]: f["kind"] == "run.finished" and f["run_id"] == r,
            timeout=300,
        )
    latencies, gaps, dups = [], 0, 0
    first = last = None
    for c in socks:
        seqs = c.seqs()
        dups += len(seqs) - len(set(seqs))
        gaps += seqs != list(range(seqs[0], seqs[-1] + 1))
        for frame, arrived in zip(c.frames, c.arrivals, strict=True):
            if frame.get("kind") == "assistant.delta" and arrived >= t_send:
                latencies.append((arrived - _ts(frame)) * 1000)
                first = arrived if first is None else min(first, arrived)
                last = arrived if last is None else max(last, arrived)
    for c in [writer, *socks]:
        await c.close()
    latencies.sort()

    return {
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "max": latencies[-1],
        "frames": len(latencies),
        "rate": len(latencies) / max(last - first, 1e-9),
        "gaps": gaps,
        "dups": dups,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--followers", default="10,30,100")
    parser.add_argument("--stream", default="200 30", help="N MS for /stream")
    parser.add_argument("--plot", type=Path, help="write a PNG of the percentiles")
    parser.add_argument("--plot-json", type=Path, help="keep the rows of each profile here")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(profile_line(), flush=True)
    user, _ = get_user_model().objects.get_or_create(username="fanout")
    log_dir = Path(tempfile.mkdtemp(prefix="agent-fanout-"))
    env = {"AGENT_TEST_HOOKS": "0", "AGENT_USER_MAX_SOCKETS": "100000"}
    server, procs = start_servers(log_dir, **env)
    cookie = session_cookie(user)
    print(f"\none session, a run of /stream {args.stream}, latency append -> receipt:")
    print(f"{'followers':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'frames/s':>9} gaps dups")
    rows = []
    try:
        for n in (int(x) for x in args.followers.split(",")):
            r = await one(server, cookie, n, args.stream, f"f{n}-{time.time()}")
            rows.append({"followers": n, **r})
            print(
                f"{n:>9} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['max']:>8.1f} "
                f"{r['rate']:>9,.0f} {r['gaps']:>4} {r['dups']:>4}",
                flush=True,
            )
    finally:
        for p in procs:
            p.stop()
    last = rows[-1]
    emit(
        "fanout",
        followers=last["followers"],
        p50_ms=last["p50"],
        p99_ms=last["p99"],
        gaps=last["gaps"],
        dups=last["dups"],
    )
    if args.plot:
        import plots

        profile = "production" if os.environ.get("DATABASE_URL") else "embedded"
        keep = args.plot_json
        series = json.loads(keep.read_text()) if keep and keep.exists() else {}
        series[profile] = rows
        if keep:
            keep.write_text(json.dumps(series, indent=1))
        plots.fanout(args.plot, series, f"Fan-out, one session, /stream {args.stream}")


if __name__ == "__main__":
    asyncio.run(main())
