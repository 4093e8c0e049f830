"""Production run worker: executes queued runs from the durable task queue.

One process executes up to ``AGENT_WORKER_CONCURRENCY`` runs at once on its
run pool. It takes a task from django-tasks-db's queue only when a pool thread
is free (so a busy worker never sits on runs another worker could start),
claims it with the queue's row lock, and hands it to the pool. Every worker
also runs the sweeper, so runs whose process died (lease expired) are taken
over from their last checkpoint.

Stopping (SIGTERM or SIGINT): the worker takes no new runs at once, and hands
every run it executes to the queue at the run's next checkpoint (every
message and tool result; docs/agents.md, "Steps and checkpoints"), where
another worker goes on with it at once, with no lease to wait for and nothing
redone. What has not reached a checkpoint within
``AGENT_WORKER_GRACE_SECONDS`` (a long model call or tool) is stopped and
handed over from its last one, its step redone elsewhere. It exits within the
grace period plus a few seconds; a second signal skips the grace period. No
run is lost to a rolling deploy.
"""

import logging
import signal
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections
from django.db.utils import OperationalError
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception

from sessions_app import fanout
from sessions_app.runtime import executor, leases, mcp
from sessions_app.runtime.pool import run_pool
from sessions_app.runtime.sweeper import Sweeper
from sessions_app.runtime.tasks import run_agent
from sessions_app.server import probes
from sessions_app.server.heap import freeze_startup_objects
from sessions_app.server.identity import worker_id
from sessions_app.server.logs import Outage

log = logging.getLogger("sessions_app.worker")
_outage = Outage(log)

QUEUE = "default"
BACKEND = "default"


class ConcurrentWorker(Worker):
    """django-tasks-db's worker, taking tasks only into free pool threads.

    A failure to record a task's result (its row was deleted with the
    session, or the queue pruned) is logged, not fatal: the run's own rows are
    the truth.
    """

    def __init__(self, *, interval: float, pool):
        super().__init__(
            queue_names=[QUEUE],
            interval=interval,
            batch=False,
            backend_name=BACKEND,
            startup_delay=False,
            max_tasks=None,
            worker_id=worker_id()[:64],
            excluded_queue_names=[],
        )
        self.pool = pool
        self.stopping = threading.Event()
        self.hurry = threading.Event()

    def configure_signals(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self.stopping.is_set():
            self.hurry.set()
        self.stopping.set()
        self.running = False

    def take_one(self) -> tuple[DBTaskResult, leases.Picked | None] | None:
        """Claim the next ready task of our queue and, in the same transaction,
        the run it starts (``leases.Picked``); None when there is none."""
        close_old_connections()
        tasks = DBTaskResult.objects.ready().filter(backend_name=BACKEND, queue_name=QUEUE)
        pick = None
        with exclusive_transaction(tasks.db):
            try:
                task_result = tasks.get_locked()
                if task_result is None:
                    return None
                task_result.claim(self.worker_id)
                pick = _pick(task_result)
            except OperationalError as exc:
                if is_locked_database_exception(exc):
                    return None
                raise
        if pick is not None:
            pick.hold()
        return task_result, pick

    def run_task(self, db_task_result, pick: leases.Picked | None = None) -> None:
        try:
            _pickup_failpoint()
            with executor.picked(pick):
                super().run_task(db_task_result)
        except DatabaseError:
            log.warning("could not record the result of task %s", db_task_result.id)
        finally:
            close_old_connections()

    def loop(self) -> None:
        """Take tasks into free threads until asked to stop."""
        while not self.stopping.is_set():
            if not self.pool.slots.acquire(timeout=self.interval):
                continue  # every thread busy
            try:
                task_result = self.take_one()
            except DatabaseError as exc:
                self.pool.slots.release()
                # The database restarted or dropped us: reconnect and go on.
                _outage.failed("taking a task (reconnecting)", exc)
                close_old_connections()
                self.stopping.wait(1)
                continue
            if task_result is None:
                self.pool.slots.release()
                self.stopping.wait(self.interval)
                continue
            self.pool.submit(lambda t=task_result: self.run_task(*t), slot_taken=True)

    def drain(self, grace: float) -> list[str]:
        """Hand every run in flight to another worker at its next checkpoint
        (or, past ``grace``, from its last one). Returns their ids."""
        handed = executor.hand_over_all(grace, self.hurry, busy=lambda: self.pool.busy > 0)
        self.pool.wait_idle(timeout=5)
        return handed


def _pick(task_result: DBTaskResult) -> leases.Picked | None:
    """The run a run task starts, claimed for this worker (None for another
    task, or a run not there to be run)."""
    if task_result.task_path != run_agent.module_path:
        return None
    args = (task_result.args_kwargs or {}).get("args") or []
    if not args or not isinstance(args[0], str):
        return None
    return leases.Picked.claim(args[0], worker_id())


def _pickup_failpoint() -> None:
    """Tests only (``AGENT_TEST_PICKUP_HOLD``, a file's path): a task taken
    waits while that file exists, so that a test can kill the worker in the
    window between taking a task and driving its run, every time."""
    hold = settings.AGENT_TEST_PICKUP_HOLD
    if hold:
        while Path(hold).exists():
            time.sleep(0.02)


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
        sweeper = Sweeper()
        sweeper.start()
        mcp.refresh_in_background()  # its MCP servers' tools, listed while it starts
        pool = run_pool()
        worker = ConcurrentWorker(interval=interval, pool=pool)
        port = settings.AGENT_WORKER_METRICS_PORT
        if port:
            host = settings.AGENT_WORKER_METRICS_HOST
            try:
                probes.serve(host, port, alive=lambda: not worker.stopping.is_set())
            except OSError as exc:
                raise CommandError(
                    f"cannot serve the worker's metrics on {host}:{port}: {exc}"
                ) from exc
            log.info("worker metrics on http://%s:%s/metrics", host, port)
        freeze_startup_objects()
        worker.configure_signals()
        # Through logging, as every line: JSON under LOG_FORMAT=json.
        log.info("run worker %s started (concurrency %s)", worker_id(), pool.size)
        worker.loop()
        log.info(
            "run worker %s stopping: %s run(s) in flight, grace %g s",
            worker_id(),
            pool.busy,
            settings.AGENT_WORKER_GRACE_SECONDS,
        )
        sweeper.stopped.set()
        handed = worker.drain(settings.AGENT_WORKER_GRACE_SECONDS)
        # The last events (run.resumed of what was handed over) go out now.
        fanout.publisher.flush()
        for run_id in handed:
            log.info("handed over run %s", run_id, extra={"run_id": run_id})
        log.info("run worker %s stopped; handed over: %s", worker_id(), ",".join(handed) or "none")
