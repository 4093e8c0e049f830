"""Fixtures shared by the test suite.

The profile under test comes from the environment, exactly as for the app:
nothing set means SQLite + the in-memory layer + embedded runs;
``DATABASE_URL`` + ``REDIS_URL`` mean PostgreSQL + Redis + run workers. The
README's test command runs the suite once per profile.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

# The test process drives sync ORM calls around async tests and Playwright's
# loop; the servers under test never get this variable (harness.server_env).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-results"

# The fixtures the app ships to sites that embed it (tests/test_testing.py).
pytest_plugins = ["sessions_app.testing"]


def pytest_configure(config):
    from django.conf import settings

    # In-process consumer tests must not start recovery/sweeper threads on the
    # test database; servers started as subprocesses do start theirs.
    settings.AGENT_RUNTIME_AUTOSTART = False
    workspaces = Path(tempfile.mkdtemp(prefix="agent-ws-"))
    settings.AGENT_WORKSPACES = workspaces
    config._agent_workspaces = workspaces
    if settings.REDIS_URL:
        # Our own key prefix, flushed: channels-redis leaves asgi:* keys behind.
        prefix = f"test{os.getpid()}"
        settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = prefix
        # The cache (the REST throttles' counts) likewise, as servers started
        # with this run's CHANNELS_PREFIX name theirs.
        settings.CACHES["default"]["KEY_PREFIX"] = prefix + "-cache"

    _flush_retries_a_deadlock()
    # A stop (./scripts/test's Ctrl-C reaches the suites side by side as
    # SIGTERM: their SIGINT is ignored in the background) ends the run as
    # Ctrl-C does, with every fixture's teardown: no server left behind.
    signal.signal(signal.SIGTERM, _interrupted)


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def _flush_retries_a_deadlock() -> None:
    """The servers under test go on for a moment after a test (a sweep every
    second, an admission after a run ends): a query of theirs joining two
    tables can deadlock with the TRUNCATE that flushes the test database, and
    PostgreSQL then cancels one side. When it cancels the flush, flush again
    (its transaction rolled back whole)."""
    from django.db import OperationalError
    from django.db.backends.base.operations import BaseDatabaseOperations

    original = BaseDatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        for attempt in range(3):
            try:
                return original(self, sql_list)
            except OperationalError as exc:
                if "deadlock detected" not in str(exc) or attempt == 2:
                    raise

    BaseDatabaseOperations.execute_sql_flush = execute_sql_flush


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "_agent_workspaces", ""), ignore_errors=True)
    from django.conf import settings

    test_db = settings.DATABASES["default"]["TEST"]["NAME"]
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        # pytest-django removes the database file, not SQLite's WAL companions.
        for suffix in ("-wal", "-shm"):
            Path(test_db + suffix).unlink(missing_ok=True)

    if settings.REDIS_URL:
        try:
            import redis

            client = redis.Redis.from_url(settings.REDIS_URL)
            prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
            for key in client.scan_iter(f"{prefix}*"):
                client.delete(key)
        except Exception:  # noqa: S110 - cleanup only
            pass


def pytest_collection_modifyitems(config, items):
    from django.conf import settings

    if settings.IS_POSTGRES and settings.REDIS_URL:
        return
    skip = pytest.mark.skip(
        reason="PRODUCTION PROFILE NOT UNDER TEST: set DATABASE_URL (PostgreSQL) and REDIS_URL"
    )
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def log_dir(tmp_path) -> Path:
    return tmp_path


@pytest.fixture(autouse=True)
def _holds_released():
    """Every ``/hold`` a test sent ends with it, released or not."""
    from tests.support.rig import Hold

    yield
    Hold.release_all()


@pytest.fixture(autouse=True)
def _fresh_channel_layer():
    """Each test gets a new channel layer (the in-memory one is bound to a loop)."""
    from channels.layers import channel_layers
    from django.conf import settings

    from sessions_app import fanout

    in_memory = not settings.REDIS_URL
    if in_memory:
        channel_layers.backends.clear()
    fanout.publisher.reset()
    yield
    if in_memory:
        channel_layers.backends.clear()
    fanout.publisher.reset()


@pytest.fixture
def no_enqueue(monkeypatch):
    """Unit level: record the runs that would be handed to the task framework
    (nothing executes them)."""
    from sessions_app.runtime import runs

    queued: list[str] = []
    monkeypatch.setattr(runs, "enqueue", queued.append)
    return queued


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-pass-1")


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user("mallory", password="mallory-pass-1")


@pytest.fixture
def cookie(user):
    from tests.harness import session_cookie

    return session_cookie(user)


@pytest.fixture(scope="session")
def _shared_server(django_db_setup, django_db_blocker, tmp_path_factory):
    """One daphne (plus two run workers in the production profile) for the session."""
    from django.conf import settings

    from tests.harness import Daphne, Worker

    log_dir = tmp_path_factory.mktemp("servers")
    procs = []
    with django_db_blocker.unblock():
        if settings.AGENT_RUNNER == "worker":
            procs += [Worker(log_dir).start(), Worker(log_dir).start()]
        daphne = Daphne(log_dir).start()
    procs.append(daphne)
    daphne.workers = procs[:-1]
    yield daphne
    for proc in procs:
        proc.stop()
    _keep_logs_on_failure(procs)
    with django_db_blocker.unblock():
        _drop_other_db_sessions()


@pytest.fixture(scope="session", autouse=True)
def _release_db_connections_at_the_end(django_db_setup, django_db_blocker):
    """Close what other threads of this process (the consumers' database pool in
    in-process tests) keep open, so the test database can be dropped."""
    yield
    with django_db_blocker.unblock():
        _drop_other_db_sessions()


def _drop_other_db_sessions() -> None:
    """Let pytest-django drop the PostgreSQL test database: servers killed
    with -9 may leave their sessions open for a moment."""
    from django.db import OperationalError, connection

    if connection.vendor != "postgresql":
        return
    for attempt in (1, 2):
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            return
        except OperationalError:
            # Under sync Playwright this process holds two connections (one
            # for the thread, one for the event loop's context Playwright
            # keeps running): an earlier call from the other one may have
            # terminated this one. Reconnect once.
            connection.close()
            if attempt == 2:
                raise


@pytest.fixture
def server(_shared_server, transactional_db):
    """The shared live server, with a clean database for this test (and every
    run worker alive: a crash test may have killed one)."""
    for proc in _shared_server.workers:
        if proc.proc.poll() is not None:
            proc.start()
            proc.wait_for_log(re.compile(r"run worker \S+ started"), timeout=30)
    yield _shared_server
    _quiesce()


@pytest.fixture
def own_server(_shared_server, transactional_db, tmp_path):
    """Start dedicated processes; the shared workers are stopped meanwhile so
    that only these execute runs (the ``server`` fixture revives them)."""
    from django.conf import settings

    from tests.harness import Daphne, Worker

    for worker in getattr(_shared_server, "workers", []):
        worker.kill()
    procs: list = []

    def start(**env):
        if settings.AGENT_RUNNER == "worker":
            procs.append(Worker(tmp_path, **env).start())
            procs.append(Worker(tmp_path, **env).start())
        d = Daphne(tmp_path, **env).start()
        procs.append(d)
        return d

    yield start, procs
    for p in procs:
        p.kill()


def _quiesce() -> None:
    """Stop what a test left running before the database is flushed: a run
    still streaming would append while PostgreSQL truncates (a deadlock)."""
    from django.utils import timezone

    from sessions_app.models import Run
    from tests.support.waiting import poll_pause

    deadline = time.monotonic() + 5
    active = Run.objects.filter(status__in=(Run.Status.RUNNING, Run.Status.QUEUED))
    while active.exists() and time.monotonic() < deadline:
        poll_pause()
    # What still runs is aborted: its next guarded append finds it finished.
    active.update(status=Run.Status.FINISHED, stop_reason="cancelled", finished_at=timezone.now())
    _drop_other_db_sessions()


def _keep_logs_on_failure(procs) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    # The suites run side by side (scripts/test), each on a database of its
    # own: each names its own.
    database = os.environ.get("DATABASE_URL", "")
    profile = f"production-{database.rsplit('/', 1)[-1]}" if database else "embedded"
    for proc in procs:
        if proc.log_path.exists():
            text = proc.log_text()
            if "Traceback" in text:
                shutil.copy(proc.log_path, ARTIFACTS / f"{profile}-{proc.log_path.name}")
