"""``sessions_app.server.db_pool``: the sockets' reads skip the health check of a
connection used a moment ago (and run again if it was broken after all); an
idle or failed connection, and every write, keep the check."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.db.utils import DatabaseError

from sessions_app.server import db_pool

pytestmark = pytest.mark.django_db(transaction=True)


# The pool's thread in these tests: only its checks are counted (another
# thread of the test process, say one a previous test's async call left
# closing its old connections, may check its own connection meanwhile).
POOL_THREAD = "db-pool-test"


@pytest.fixture
def checks(monkeypatch):
    """Counts the health checks (``is_usable``) of the pool thread's connection."""
    calls = []
    wrapper = type(connections["default"])
    real = wrapper.is_usable

    def counted(self):
        if threading.current_thread().name.startswith(POOL_THREAD):
            calls.append(self.alias)
        return real(self)

    monkeypatch.setattr(wrapper, "is_usable", counted)
    return calls


def _query():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone()[0]


def _backend_pid():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


FAILED_RUNS: list[int] = []


def _fail():
    FAILED_RUNS.append(1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT no_such_column FROM no_such_table")


@pytest.fixture
def executor():
    """A pool of one thread (the loop's would spread the calls over several)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=POOL_THREAD)
    yield pool
    pool.submit(connections.close_all).result()
    pool.shutdown()


@pytest.fixture
def on_one_thread(executor):
    """``reading_in_db_pool`` on that thread."""
    return lambda func: db_pool.reading_in_db_pool(func, executor)


async def test_calls_a_moment_apart_check_the_connection_once(checks, on_one_thread):
    """Back-to-back calls on one thread: the first checks its connection, the
    next ones (within HEALTHY_SECONDS) do not: one round trip less each."""
    call = on_one_thread(_query)
    for _ in range(5):
        assert await call() == 1
    assert len(checks) <= 1


async def test_a_connection_idle_longer_is_checked_every_time(checks, on_one_thread, monkeypatch):
    """Past HEALTHY_SECONDS since the thread's last call, the check runs as
    Django's CONN_HEALTH_CHECKS does."""
    monkeypatch.setattr(db_pool, "HEALTHY_SECONDS", 0.0)
    call = on_one_thread(_query)
    await call()
    before = len(checks)
    for _ in range(3):
        await call()
    assert len(checks) - before == 3


async def test_after_a_database_error_the_connection_is_checked(checks, on_one_thread):
    """A call that raised a database error on a sound connection is not run
    again (its error is its own); the connection is checked before the
    thread's next query, and that query works."""
    call, fail = on_one_thread(_query), on_one_thread(_fail)
    await call()
    before = len(checks)
    FAILED_RUNS.clear()
    with pytest.raises(DatabaseError):
        await fail()
    assert len(FAILED_RUNS) == 1
    assert len(checks) > before
    assert await call() == 1


async def test_a_write_is_checked_every_time(checks, executor):
    """A call that may write (``in_db_pool``) keeps Django's check before each
    call: it could not be run again if its connection failed."""
    call = db_pool.in_db_pool(_query, executor)
    for _ in range(3):
        await call()
    assert len(checks) >= 2


async def test_a_read_on_a_connection_dropped_meanwhile_runs_again(checks, on_one_thread):
    """The database dropped the thread's connection a moment after its last
    call (a restart, a pooler): the next read, taking it on trust, fails,
    and is run again on a new connection; the caller sees only its result."""
    if connection.vendor != "postgresql":
        pytest.skip("dropping a connection from outside needs a database server")
    pid = await on_one_thread(_backend_pid)()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    calls = []

    def counted_query():
        calls.append(1)
        return _query()

    assert await on_one_thread(counted_query)() == 1
    assert len(calls) == 2  # failed on the dropped connection, then ran again
    new_pid = await on_one_thread(_backend_pid)()
    assert new_pid != pid
