"""The embedded profile: runs execute inside the server process.

``EmbeddedBackend`` is a django-tasks backend that executes tasks on the
process's one run pool (``runtime.pool``, ``AGENT_WORKER_CONCURRENCY``
threads), so a run never blocks the server's event loop. django-tasks makes a
backend instance per asgiref context; the pool is not theirs, so the number of
run threads stays bounded however many sockets and contexts there are.
Nothing is durable in it, and nothing needs to be: the runs' rows are the
truth, and ``sweeper.recover_at_startup`` re-enqueues at start-up whatever the previous
process left to do (and takes over, from its last checkpoint, what it was
executing).
"""

from __future__ import annotations

import logging
import threading

from django.utils import timezone
from django_tasks.backends.base import BaseTaskBackend
from django_tasks.base import Task, TaskResult, TaskResultStatus
from django_tasks.utils import get_random_id

from sessions_app.runtime.pool import run_pool
from sessions_app.runtime.sweeper import Sweeper, recover_at_startup

log = logging.getLogger(__name__)


class EmbeddedBackend(BaseTaskBackend):
    """Runs tasks on a thread pool of this process, after the enqueuing commit."""

    supports_defer = False
    supports_async_task = False
    supports_get_result = False
    enqueue_after_commit = True

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
        run_pool().submit(lambda: task.call(*args, **kwargs))
        return result


_started = threading.Lock()
_done = False


def start_embedded_runtime() -> None:
    """Recover what the previous process left and start the sweeper, once."""
    global _done
    with _started:
        if _done:
            return
        _done = True

    recover_at_startup()
    Sweeper().start()
