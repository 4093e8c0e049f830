"""What the benchmark scripts share: the profile line they print first, and the
servers they start (one daphne, plus a run worker in the production profile).
Import after ``django_setup``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.db import connection

from tests.harness import Daphne, Process, Worker


def profile_line() -> str:
    """Which database, channel layer and runner this run measures, on what."""
    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    return (
        f"profile: database={connection.vendor} layer={layer} runner={settings.AGENT_RUNNER}; "
        f"python {sys.version.split()[0]}; {os.cpu_count()} cpus"
    )


def percentile(values, q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; NaN for none)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


# daphne's options as ``scripts/run`` and the systemd unit give them: its own
# access log off (the app's, ``server.access_log``, is on). Every bench
# measures the server as it ships (``bench/floor.py``'s daphne too).
SHIPPED_ARGS = ("--verbosity", "0")


def start_servers(log_dir: Path, port: int = 0, **env: str) -> tuple[Daphne, list[Process]]:
    """One daphne (on ``port``, 0 for a free one), and a run worker when runs
    execute in workers; returns the daphne and every process to stop."""
    procs: list[Process] = []
    if settings.AGENT_RUNNER == "worker":
        procs.append(Worker(log_dir, **env).start())
    server = Daphne(log_dir, port=port, args=SHIPPED_ARGS, **env).start()
    procs.append(server)
    return server, procs


def emit(bench: str, **figures) -> None:
    """The run's headline figures as one machine-readable line (``RESULT
    {json}``), also written to the file ``BENCH_RESULT`` names: what
    ``bench/ab.py`` reads from every bench it runs."""
    import json

    line = json.dumps({"bench": bench, **figures})
    print(f"RESULT {line}", flush=True)
    if os.environ.get("BENCH_RESULT"):
        Path(os.environ["BENCH_RESULT"]).write_text(line)


@contextlib.contextmanager
def py_spy(pid: int, out: str | None, rate: int = 200):
    """Record process ``pid`` with py-spy while the block runs (nothing when
    ``out`` is None): collapsed stacks, idle frames and threads included,
    ``--nonblocking`` so that the profiler does not slow the server. The
    file is what a resolving note keeps; summarise it with ``bench/stacks.py``."""
    if out is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    with open(f"{out}.log", "wb") as log:
        proc = subprocess.Popen(
            [str(spy), "record", "--nonblocking", "--idle", "--threads", "-r", str(rate),
             "-f", "raw", "-o", out, "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        try:
            yield
        finally:
            proc.send_signal(2)  # py-spy writes its file on SIGINT
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode not in (0, -2):
                print(f"py-spy failed ({proc.returncode}): see {out}.log", file=sys.stderr)
