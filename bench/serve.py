"""Start the server for an outside load tool, print how to reach it, keep it up.

For a load tool of your own (the benches of this folder start their servers
themselves): give it the printed ``--url``, ``--cookie`` and ``--origin``. One
daphne, plus one run worker in the production profile:

    .venv/bin/python bench/serve.py                      # embedded profile
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/serve.py

To measure two versions against the same prepared sessions, keep the data
and the port: set ``AGENT_VAR_DIR`` (embedded) or use the same database, the
same ``SECRET_KEY`` and ``--port``. Stop it with Ctrl-C (or SIGTERM); it stops
what it started. ``--pid-file``
names a file that gets the daphne's pid (for a profiler: ``py-spy record
--pid``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
from common import start_servers  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from tests.harness import session_cookie  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid-file", type=Path)
    parser.add_argument("--port", type=int, default=0, help="daphne's port (default: a free one)")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="perf")
    log_dir = Path(tempfile.mkdtemp(prefix="agent-serve-"))
    env = {"AGENT_TEST_HOOKS": "0", "AGENT_USER_MAX_SOCKETS": "10000"}
    server, procs = start_servers(log_dir, port=args.port, **env)
    if args.pid_file:
        args.pid_file.write_text(str(server.proc.pid))
    print(
        f"--url {server.ws} --cookie '{session_cookie(user)}' --origin {server.http}\n"
        f"(server logs in {log_dir}; Ctrl-C stops)",
        flush=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            p.stop()


if __name__ == "__main__":
    sys.exit(main())
