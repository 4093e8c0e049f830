"""What the benchmark scripts share: the profile line they print first, and the
servers they start (one daphne, plus a run worker in the production profile).
Import after ``django_setup``."""

from __future__ import annotations

import os
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


def start_servers(log_dir: Path, port: int = 0, **env: str) -> tuple[Daphne, list[Process]]:
    """One daphne (on ``port``, 0 for a free one), and a run worker when runs
    execute in workers; returns the daphne and every process to stop."""
    procs: list[Process] = []
    if settings.AGENT_RUNNER == "worker":
        procs.append(Worker(log_dir, **env).start())
    server = Daphne(log_dir, port=port, **env).start()
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
