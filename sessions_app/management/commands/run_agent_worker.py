"""Production run worker: executes queued runs from the durable task queue.

Wraps django-tasks-db's worker loop and adds the sweeper, so that every worker
also finishes runs whose process died (lease expired) as ``interrupted``.
Start several for concurrency: each executes one run at a time.
"""

import logging
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections
from django_tasks_db.management.commands.db_worker import Worker

from sessions_app.runtime.executor import worker_id
from sessions_app.runtime.sweeper import Sweeper

log = logging.getLogger("sessions_app.worker")


class ResilientWorker(Worker):
    """A worker that outlives a task row deleted under it (the session was
    deleted, or the queue pruned): the run's own rows are the truth, so a
    failure to record the task's result is logged, not fatal."""

    def run_task(self, db_task_result) -> None:
        try:
            super().run_task(db_task_result)
        except DatabaseError:
            log.warning("could not record the result of task %s", db_task_result.id)
            close_old_connections()


class Command(BaseCommand):
    help = "Execute agent runs from the database task queue (production profile)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--interval", type=float, default=0.1, help="seconds between queue checks when idle"
        )

    def handle(self, *args, interval: float, **options):
        if settings.AGENT_RUNNER != "worker":
            raise CommandError(
                "AGENT_RUNNER is not 'worker': runs execute inside the server process "
                "(set REDIS_URL or AGENT_RUNNER=worker to use separate workers)"
            )
        Sweeper().start()
        worker = ResilientWorker(
            queue_names=["default"],
            interval=interval,
            batch=False,
            backend_name="default",
            startup_delay=False,
            max_tasks=None,
            worker_id=worker_id()[:64],
            excluded_queue_names=[],
        )
        worker.configure_signals()
        self.stdout.write(f"run worker {worker_id()} started", ending="\n")
        self.stdout.flush()
        while worker.running:
            try:
                worker.run()
            except DatabaseError:
                # The database restarted or dropped us: reconnect and go on.
                log.exception("worker loop failed; reconnecting")
                close_old_connections()
                time.sleep(1)
