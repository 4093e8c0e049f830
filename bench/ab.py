"""A/B: the headline benches on a revision and on the working tree, alternately, in one run.

    .venv/bin/python bench/ab.py REV [--rounds N] [--quick] [--only NAME,…] [--profiles …]

REV (a commit, a tag, ``main``…) is checked out in a git worktree. Then, for
each round, each bench runs once on each side, the order alternating from
one bench and round to the next, so that the machine's drift hits both
sides alike. It prints one table: per figure, the median of each side, the
ratio working tree / REV, and each side's spread (min–max); ``--out`` keeps
it (``ab.md``) with every run's log.

What comes from where: the benches' clients (the load, the data they build,
the measuring) are always the working tree's, so both sides are measured
with the same ruler; the servers (daphne and the run workers: Python,
templates, the browser's JavaScript) come from each side's tree
(``AGENT_SERVER_ROOT``, read by ``tests/harness.py``). Both sides share one
database per bench and profile, kept across rounds (the data is built once,
by the first run): the working tree's migrations make its schema, so a REV
whose models cannot read it fails its runs, and the table says so.

The benches (``--only`` picks some; each is a script of ``bench/`` that
ends with a ``RESULT`` line, ``common.emit``):

- ``resume``: resume after K = 10, 1,000, 10,000 missed events, plain and
  batch, as a ratio to Socket.IO's recovery measured in the same run
  (``bench/resume.py``), embedded and production;
- ``fresh_open``: a fresh tab on a 100k-event session, and its refresh (Chromium);
- ``storm``: 2,000 sockets resuming at once;
- ``fanout``: append-to-receipt p99 with 100 followers;
- ``concurrent_runs``: 50 runs on 2 workers, wall time and p99 (production);
- ``idle``: memory per idle socket;
- ``sse_replay``: a 10k-event replay over the SSE stream.

``--quick`` (under 10 minutes) runs two rounds of smaller sizes. Production
runs need PostgreSQL and Redis (``--pg``, ``--redis``): its database is made
afresh per bench (``agentab_<bench>``), and its Redis database flushed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


@dataclass
class Bench:
    name: str
    script: str
    full: list[str]
    quick: list[str]
    profiles: tuple[str, ...] = ("embedded",)
    # The figures to compare (shell patterns: ``plain_k*_ratio``).
    figures: tuple[str, ...] = ()
    timeout: float = 900
    results: dict = field(default_factory=dict)


BENCHES = [
    Bench(
        "resume",
        "resume.py",
        ["--ks", "10,1000,10000", "--rounds", "3", "--reps", "2"],
        ["--ks", "10,1000,10000", "--rounds", "1", "--reps", "2"],
        ("embedded", "production"),
        ("plain_k*_ratio", "batch_k*_ratio"),
    ),
    Bench(
        "fresh_open",
        "fresh_open.py",
        ["--turns", "962", "--repeat", "3"],
        ["--turns", "962", "--repeat", "1"],
        figures=("fresh_ms", "refresh_ms"),
    ),
    Bench("storm", "storm.py", ["--sockets", "2000"], ["--sockets", "2000"], figures=("all_s",)),
    Bench(
        "fanout",
        "fanout.py",
        ["--followers", "100"],
        ["--followers", "100", "--stream", "100 30"],
        ("embedded", "production"),
        ("p99_ms",),
    ),
    Bench(
        "concurrent_runs",
        "concurrent_runs.py",
        ["--sessions", "200", "--runs", "50", "--stream", "200 30", "--workers", "2"],
        ["--sessions", "100", "--runs", "50", "--stream", "200 30", "--workers", "2"],
        ("production",),
        ("wall_s", "p99_ms"),
    ),
    Bench(
        "idle",
        "idle.py",
        ["--sockets", "5000", "--idle", "10"],
        ["--sockets", "2000", "--idle", "3"],
        figures=("kib_per_socket",),
    ),
    Bench(
        "sse_replay",
        "sse_replay.py",
        ["--turns", "96", "--repeat", "5"],
        ["--turns", "96", "--repeat", "3"],
        figures=("replay_ms",),
    ),
]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def reset_production(args, bench: str) -> dict[str, str]:
    """A fresh PostgreSQL database for ``bench`` and a flushed Redis database."""
    import psycopg
    import redis

    name = f"agentab_{bench}"
    with psycopg.connect(f"{args.pg}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    redis.Redis.from_url(args.redis).flushdb()
    return {"DATABASE_URL": f"{args.pg}/{name}", "REDIS_URL": args.redis}


def run_once(bench: Bench, profile: str, side: str, root: Path, args, env: dict) -> dict | None:
    """One run of ``bench`` with the servers from ``root``; its figures, or None."""
    result = args.out / f"{bench.name}-{profile}-{side}-{time.monotonic_ns()}.json"
    log = result.with_suffix(".log")
    run_env = {**env, "AGENT_SERVER_ROOT": str(root), "BENCH_RESULT": str(result)}
    cmd = [PY, str(ROOT / "bench" / bench.script), *(bench.quick if args.quick else bench.full)]
    began = time.monotonic()
    with open(log, "w") as out:
        try:
            code = subprocess.run(
                cmd,
                cwd=ROOT,
                env=run_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=bench.timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    took = time.monotonic() - began
    if code != 0 or not result.exists():
        tail = log.read_text().strip().splitlines()[-3:]
        print(
            f"  {bench.name} {profile} {side}: FAILED ({code}) in {took:.0f} s: {tail}", flush=True
        )
        return None
    figures = json.loads(result.read_text())
    print(f"  {bench.name} {profile} {side}: {took:.0f} s", flush=True)
    return figures


def wanted(bench: Bench, figures: dict) -> list[str]:
    return sorted(k for k in figures if any(fnmatch.fnmatch(k, f) for f in bench.figures))


def table(benches: list[Bench], rev: str) -> str:
    lines = [
        f"| bench | profile | figure | {rev} median | tree median | tree / {rev} | "
        f"{rev} spread | tree spread |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for bench in benches:
        for profile, sides in bench.results.items():
            names = sorted(
                {k for runs in sides.values() for r in runs if r for k in wanted(bench, r)}
            )
            for name in names:
                a = [r[name] for r in sides.get("rev", []) if r and name in r]
                b = [r[name] for r in sides.get("tree", []) if r and name in r]
                ma = statistics.median(a) if a else None
                mb = statistics.median(b) if b else None
                ratio = f"{mb / ma:.2f}" if ma and mb is not None else "n/a"
                lines.append(
                    f"| {bench.name} | {profile} | {name} | {_num(ma)} | {_num(mb)} | {ratio} | "
                    f"{_spread(a)} | {_spread(b)} |"
                )
    return "\n".join(lines)


def _num(x) -> str:
    return "failed" if x is None else f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def _spread(xs) -> str:
    return f"{_num(min(xs))}–{_num(max(xs))} ({len(xs)})" if xs else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the revision to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (--quick: 2)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, under 10 minutes")
    parser.add_argument("--only", default="", help="comma-separated bench names")
    parser.add_argument("--profiles", default="embedded,production")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/7")
    parser.add_argument(
        "--out", type=Path, default=None, help="logs and ab.md (default: a temp dir)"
    )
    parser.add_argument("--keep-worktree", action="store_true")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    args.out = args.out or Path(tempfile.mkdtemp(prefix="agent-ab-"))
    args.out.mkdir(parents=True, exist_ok=True)
    sha = git("rev-parse", "--verify", f"{args.rev}^{{commit}}")
    label = args.rev if len(args.rev) <= 12 else sha[:9]
    worktree = args.out / f"rev-{sha[:12]}"
    if not worktree.exists():
        git("worktree", "add", "--detach", str(worktree), sha)
    only = set(filter(None, args.only.split(",")))
    profiles = set(args.profiles.split(","))
    benches = [b for b in BENCHES if not only or b.name in only]
    unknown = only - {b.name for b in BENCHES}
    if unknown:
        parser.error(f"no bench named {', '.join(sorted(unknown))}")
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    sides = [("rev", worktree), ("tree", ROOT)]
    print(f"A/B: {label} ({sha[:12]}) vs the working tree, {rounds} rounds; logs in {args.out}")
    began = time.monotonic()
    envs: dict[tuple[str, str], dict] = {}
    try:
        turn = 0
        for r in range(rounds):
            for bench in benches:
                for profile in [p for p in bench.profiles if p in profiles]:
                    key = (bench.name, profile)
                    if key not in envs:  # one database per bench and profile, kept
                        if profile == "production":
                            envs[key] = {**base, **reset_production(args, bench.name)}
                        else:
                            var = tempfile.mkdtemp(prefix=f"ab-{bench.name}-", dir=args.out)
                            envs[key] = {**base, "AGENT_VAR_DIR": var}
                    order = sides if turn % 2 == 0 else sides[::-1]
                    turn += 1
                    print(f"round {r + 1}/{rounds}: {bench.name} ({profile})", flush=True)
                    for side, root in order:
                        got = run_once(bench, profile, side, root, args, envs[key])
                        bench.results.setdefault(profile, {}).setdefault(side, []).append(got)
    finally:
        if not args.keep_worktree:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT)
    load = Path("/proc/loadavg").read_text().split()[:3]
    text = (
        f"A/B {label} ({sha[:12]}) vs working tree on {git('rev-parse', '--short', 'HEAD')}"
        f"{' +changes' if git('status', '--porcelain', '--untracked-files=no') else ''}, "
        f"{rounds} rounds{' (quick)' if args.quick else ''}, {time.monotonic() - began:.0f} s, "
        f"{os.cpu_count()} cpus, load {' '.join(load)}; lower is better everywhere\n\n"
        + table(benches, label)
    )
    (args.out / "ab.md").write_text(text + "\n")
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
