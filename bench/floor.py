"""Serve ``bench/floor_app.py`` (the floor for the resume comparison) on daphne.

    .venv/bin/python bench/floor.py [--port N]

prints the ``--url`` to give the resume kit's ``run_side_by_side.sh`` (the kit
that came with the project brief; no cookie, any origin) and keeps one daphne
process up until Ctrl-C or SIGTERM. Run the kit against it and against the
product (``bench/serve.py``) back to back: the floor's ratio to Socket.IO is
the best any server on daphne sending plain v1 frames can reach.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="daphne's port (default: a free one)")
    args = parser.parse_args()
    port = args.port
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    daphne = Path(sys.executable).with_name("daphne")
    proc = subprocess.Popen(
        [str(daphne), "-b", "127.0.0.1", "-p", str(port), "bench.floor_app:application"],
        cwd=ROOT,
    )
    print(f"--url ws://127.0.0.1:{port}/ws/sessions/ --origin http://127.0.0.1:{port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
