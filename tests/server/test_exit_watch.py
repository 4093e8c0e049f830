"""server/exit_watch.py: a stopped server ends even when a thread it cannot
stop is left (a request waiting on a loop that is gone)."""

from __future__ import annotations

import subprocess
import sys

from tests.harness import ROOT

SCRIPT = """
import logging, threading
logging.basicConfig(level=logging.INFO, format="%(message)s")
from sessions_app.server import exit_watch
stuck = threading.Event()
threading.Thread(target=stuck.wait, name="ThreadPoolExecutor-7_0").start()
exit_watch.exit_after(0.3)
"""


def test_a_thread_left_blocked_does_not_keep_the_process_alive():
    """The process ends with status 0 soon after the bound, saying which
    threads it left, instead of waiting on them forever."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0
    assert "1 thread(s) did not end within 0.3 s (ThreadPoolExecutor-7): exiting" in done.stderr


def test_nothing_left_means_nothing_to_do():
    """With no thread left, the watch ends quietly and the process exits on its own."""
    script = "from sessions_app.server import exit_watch\nexit_watch.exit_after(0.3).join(5)\n"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=20
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_run_threads_get_the_longer_grace():
    """A run thread (handing its run back, a tool logging its result) is given
    the runs' grace, longer than a request thread's: one that ends within it
    lets the process end on its own, with nothing cut."""
    script = (
        "import threading, time\n"
        "from sessions_app.server import exit_watch\n"
        "threading.Thread(target=time.sleep, args=(0.8,), name='run_0').start()\n"
        "exit_watch.exit_after(0.2, runs_grace=5)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=20
    )
    assert (done.returncode, done.stderr) == (0, "")
