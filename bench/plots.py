"""PNG plots for ``docs/benchmarks.md`` (needs the ``bench`` extra: matplotlib).

Two figures:

- fan-out: append → receipt latency percentiles against the number of
  followers, one line per profile (``bench/fanout.py --plot FILE`` calls
  ``fanout``);
- resume: median time until all K missed events arrived, against K, for
  this project, the floor (``bench/floor.py``) and Socket.IO, from the
  ``trials.jsonl`` files the resume kit writes into its ``--out`` directory:

      .venv/bin/python bench/plots.py resume OUT.png ours=DIR floor=DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        sys.exit("plots need matplotlib: pip install -e '.[bench]'")
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def fanout(path: Path, series: dict[str, list[dict]], title: str) -> None:
    """``series``: label → rows with ``followers``, ``p50``, ``p99``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, rows in series.items():
        rows = sorted(rows, key=lambda r: r["followers"])
        xs = [r["followers"] for r in rows]
        (line,) = ax.plot(xs, [r["p99"] for r in rows], marker="o", label=f"{label} p99")
        ax.plot(
            xs,
            [r["p50"] for r in rows],
            marker=".",
            ls="--",
            color=line.get_color(),
            label=f"{label} p50",
        )
    ax.axhline(100, color="grey", lw=0.8, ls=":", label="p99 target (100 ms)")
    ax.set_xlabel("followers of one session")
    ax.set_ylabel("append → receipt (ms)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot: {path}")


def _medians(trials: Path, impls: set[str]) -> dict[str, dict[int, float]]:
    data: dict[tuple[str, int], list[float]] = defaultdict(list)
    for line in trials.read_text().splitlines():
        row = json.loads(line)
        if row.get("impl") in impls:
            data[(row["impl"], row["k"])].append(row["done_ms"])
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for (impl, k), xs in data.items():
        out[impl][k] = statistics.median(xs)
    return out


def resume(path: Path, runs: dict[str, Path]) -> None:
    """``runs``: label → the kit's ``--out`` directory of a run against that server."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    first = True
    for label, out in runs.items():
        med = _medians(out / "trials.jsonl", {"ours", "socketio"})
        ks = sorted(med["ours"])
        ax.plot(ks, [med["ours"][k] for k in ks], marker="o", label=label)
        if first:  # Socket.IO ran in every run; its first run stands for all
            ks = sorted(med["socketio"])
            ax.plot(
                ks,
                [med["socketio"][k] for k in ks],
                marker="s",
                color="black",
                label="Socket.IO CSR (same run as the first line)",
            )
            first = False
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("K missed events")
    ax.set_ylabel("median ms until all K received")
    ax.set_title("Resume after an outage (Python client)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot: {path}")


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "resume":
        sys.exit(__doc__)
    resume(Path(sys.argv[2]), {a.split("=", 1)[0]: Path(a.split("=", 1)[1]) for a in sys.argv[3:]})
