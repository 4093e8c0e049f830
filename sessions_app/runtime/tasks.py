"""The task-framework entry point for runs (django-tasks, the API Django 6 ships)."""

from __future__ import annotations

from django.db import transaction
from django_tasks import task, task_backends

from sessions_app.runtime.executor import execute_run


@task()
def run_agent(run_id: str) -> None:
    """Start or continue one run (a claimed compare-and-set: safe to deliver twice)."""
    execute_run(run_id)


def enqueue_run(run_id: str) -> None:
    """Queue the run's task: inside the caller's transaction where the backend is
    durable (the task row commits or rolls back with the run), else after commit."""
    backend = task_backends[run_agent.backend]
    if getattr(backend, "enqueue_after_commit", False):
        transaction.on_commit(lambda: run_agent.enqueue(run_id))
    else:
        run_agent.enqueue(run_id)
