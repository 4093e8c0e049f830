"""The embedded profile: runs execute inside the server process.

``EmbeddedBackend`` is a django-tasks backend that executes tasks on a small
thread pool of this process, so a run never blocks the server's event loop.
Nothing is durable in it, and nothing needs to be: the runs' rows are the
truth, and ``recover_embedded`` re-enqueues at start-up whatever the previous
process left to do (and finishes as ``interrupted`` what it was executing).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.utils import timezone
from django_tasks.backends.base import BaseTaskBackend
from django_tasks.base import Task, TaskResult, TaskResultStatus
from django_tasks.utils import get_random_id

log = logging.getLogger(__name__)


class EmbeddedBackend(BaseTaskBackend):
    """Runs tasks on a thread pool of this process, after the enqueuing commit."""

    supports_defer = False
    supports_async_task = False
    supports_get_result = False
    enqueue_after_commit = True

    def __init__(self, alias: str, params: dict[str, Any]):
        super().__init__(alias, params)
        workers = int(params.get("OPTIONS", {}).get("max_workers", 16))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="run")

    def enqueue(self, task: Task, args, kwargs) -> TaskResult:
        self.validate_task(task)
        result = TaskResult(
            task=task,
            id=get_random_id(),
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        self._pool.submit(self._call, task, args, kwargs)
        return result

    @staticmethod
    def _call(task: Task, args, kwargs) -> None:
        try:
            task.call(*args, **kwargs)
        except Exception:
            log.exception("task %s failed", task.name)


_started = threading.Lock()
_done = False


def start_embedded_runtime() -> None:
    """Recover what the previous process left and start the sweeper, once."""
    global _done
    with _started:
        if _done:
            return
        _done = True
    from .sweeper import Sweeper, recover_at_startup

    recover_at_startup()
    Sweeper().start()
