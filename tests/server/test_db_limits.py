"""What a stuck database client can hold up (sessions_app/server/db_limits.py):
every PostgreSQL connection of the app waits for a lock at most
AGENT_DB_LOCK_TIMEOUT_SECONDS, and PostgreSQL ends one left idle inside a
transaction after AGENT_DB_IDLE_IN_TRANSACTION_SECONDS, its locks with it."""

from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, connection, connections, transaction

from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("the limits are PostgreSQL's (the embedded profile has one process)")


def _fresh(settings, lock: float, idle: float):
    settings.AGENT_DB_LOCK_TIMEOUT_SECONDS = lock
    settings.AGENT_DB_IDLE_IN_TRANSACTION_SECONDS = idle
    connection.close()  # the next query opens a connection with these


def test_every_connection_opens_with_its_limits(settings):
    """A new connection says the configured limits."""
    _fresh(settings, 7, 45)
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "7s"
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] == "45s"


def test_a_frozen_holder_blocks_a_session_only_until_its_idle_limit(settings, user):
    """A client that locked a session's row and then stopped (a frozen
    worker) is ended by PostgreSQL after the idle limit; another process's
    write of that row waits for it no longer than that, then goes through."""
    session = create_session(user)
    _fresh(settings, 30, 1)
    locked, release = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def frozen() -> None:
        try:
            with transaction.atomic():
                AgentSession.objects.select_for_update().get(id=session.id)
                locked.set()
                release.wait(10)  # frozen: idle inside its transaction
                AgentSession.objects.filter(id=session.id).update(title="late")
        except DatabaseError as exc:
            failure.append(exc)
        finally:
            connections.close_all()

    holder = threading.Thread(target=frozen)
    holder.start()
    assert locked.wait(10)
    AgentSession.objects.filter(id=session.id).update(title="written")  # waits ≤ 1 s
    release.set()
    holder.join(10)
    assert AgentSession.objects.get(id=session.id).title == "written"
    assert failure, "the frozen holder's session was ended"
