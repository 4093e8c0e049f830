"""What a stuck database client can hold up, bounded (PostgreSQL only).

Every connection the app opens sets, as it opens:

- ``lock_timeout`` (``AGENT_DB_LOCK_TIMEOUT_SECONDS``): a statement that
  waits longer for a row lock fails, rather than queueing behind a holder
  that may never let go (a worker frozen inside a transaction: its
  sessions' appends and the other processes' sweepers would wait as long
  as the freeze);
- ``idle_in_transaction_session_timeout``
  (``AGENT_DB_IDLE_IN_TRANSACTION_SECONDS``): PostgreSQL ends a session left
  idle inside a transaction that long, and its locks go with it. No
  transaction of the app waits on anything but the database, so only a
  frozen or lost client reaches it.

Behind a transaction-mode PgBouncer a ``SET`` reaches whichever server
connection runs it: the runbook sets both on the role as well (``ALTER
ROLE … SET``), which holds for every server connection. 0 turns one off.
"""

from __future__ import annotations

from django.conf import settings
from django.db.backends.signals import connection_created


def _limit(sender, connection, **kwargs) -> None:
    if connection.vendor != "postgresql":
        return
    lock = int(settings.AGENT_DB_LOCK_TIMEOUT_SECONDS * 1000)
    idle = int(settings.AGENT_DB_IDLE_IN_TRANSACTION_SECONDS * 1000)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('lock_timeout', %s, false), "
            "set_config('idle_in_transaction_session_timeout', %s, false)",
            [f"{lock}ms", f"{idle}ms"],
        )


def connect() -> None:
    connection_created.connect(_limit, dispatch_uid="sessions_app.db_limits")
