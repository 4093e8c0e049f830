"""Serve ``bench/floor_app.py`` (the floor: a bare daphne application) on daphne.

    .venv/bin/python bench/floor.py [--port N]

keeps one daphne process up until Ctrl-C or SIGTERM and prints its URL, for a
client of your own. The benches start it themselves through ``start``, and
measure it beside the product in the same run: ``bench/resume.py --floor``
(resume after K missed events, as a ratio to Socket.IO), ``bench/storm.py
--floor`` (2,000 sockets resuming at once) and ``bench/idle.py --floor``
(memory per idle socket). What the floor reaches is the best any server on
daphne sending plain v1 frames can reach on that machine.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start(port: int = 0, verbosity: int = 1) -> tuple[subprocess.Popen, int]:
    """One daphne serving bench/floor_app.py on ``port`` (a free one if 0),
    returned once it accepts connections."""
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    daphne = Path(sys.executable).with_name("daphne")
    proc = subprocess.Popen(
        [str(daphne), "-v", str(verbosity), "-e",
         f"tcp:port={port}:interface=127.0.0.1:backlog=4096",  # as tests.harness.Daphne
         "bench.floor_app:application"],
        cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)  # sleep-ok: a bench, waiting for a port
    proc.kill()
    raise SystemExit("the floor's daphne did not start")


def serve() -> types.SimpleNamespace:
    """``start`` on a free port, quiet (``-v 0``, as the product's benches run
    daphne): a handle as the benches use a server (``proc``, ``ws``,
    ``http``, ``stop()``)."""
    proc, port = start(0, 0)

    def stop() -> None:
        proc.terminate()
        proc.wait(10)

    return types.SimpleNamespace(
        proc=proc,
        ws=f"ws://127.0.0.1:{port}/ws/sessions/",
        http=f"http://127.0.0.1:{port}",
        stop=stop,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="daphne's port (default: a free one)")
    args = parser.parse_args()
    proc, port = start(args.port)
    print(f"--url ws://127.0.0.1:{port}/ws/sessions/ --origin http://127.0.0.1:{port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
