"""The one bounded pool of run threads in a process.

Runs are synchronous code (agents call model APIs, tools run programs) that
spend most of their time waiting, so a process executes many at once on
threads. There is exactly one pool per process, whatever the number of
sockets, asgiref contexts or task backends asking for it, sized by
``AGENT_WORKER_CONCURRENCY``. ``slots`` lets a worker take a run from the
durable queue only when a thread is free to execute it at once, so a busy
worker never holds runs another worker could start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings

log = logging.getLogger(__name__)


class RunPool:
    """``size`` threads and ``size`` slots; ``submit`` runs a callable on one."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError("the run pool needs at least one thread")
        self.size = size
        self.slots = threading.BoundedSemaphore(size)
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="run")
        self._busy = 0
        self._idle = threading.Condition()

    def submit(self, fn: Callable[[], None], *, slot_taken: bool = False) -> Future:
        """Run ``fn`` on a pool thread (queued behind the others if all are busy).

        With ``slot_taken`` the caller already acquired one of ``slots``; it is
        given back when ``fn`` returns.
        """
        with self._idle:
            self._busy += 1
        return self._executor.submit(self._call, fn, slot_taken)

    def _call(self, fn: Callable[[], None], slot_taken: bool) -> None:
        try:
            fn()
        except Exception:
            log.exception("a run task failed")
        finally:
            if slot_taken:
                self.slots.release()
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    @property
    def busy(self) -> int:
        """Callables submitted and not yet returned."""
        return self._busy

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is running or queued; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)


_pool: RunPool | None = None
_pool_lock = threading.Lock()


def run_pool() -> RunPool:
    """This process's run pool (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = RunPool(settings.AGENT_WORKER_CONCURRENCY)
        return _pool
