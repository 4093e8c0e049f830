"""The session cookie's user, as Channels' ``get_user`` finds it, in two plain reads.

Every socket pays for this lookup before its first answer, and on a reconnect
storm every socket at once. Through the ORM its two reads (the session row,
then the user row) cost 0.42 ms on the benchmark machine, 85 % of it building
the queries; as plain SQL they cost 0.07 ms (docs/benchmarks.md). So for the
default configuration (database sessions, ``ModelBackend``, a user manager
that does not filter) the rows are read with plain SQL and everything else is
Django's own: the session's decoding and expiry, ``user_can_authenticate``,
the session hash check. Any other configuration goes through
``channels.auth.get_user`` unchanged.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from channels.auth import _get_user_session_key as user_session_key
from channels.auth import get_user
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, get_user_model, load_backend
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.backends import db as db_sessions
from django.db import connections, models, router
from django.utils import timezone
from django.utils.crypto import constant_time_compare

_DB_SESSIONS = "django.contrib.sessions.backends.db"


class SessionStore(db_sessions.SessionStore):
    """The database session store, its row read with one plain SELECT."""

    def load(self):
        if not self.session_key:
            self._session_key = None
            return {}
        table = self.model._meta.db_table
        connection = connections[router.db_for_read(self.model)]
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT session_data FROM {connection.ops.quote_name(table)} "  # noqa: S608 (the model's table)
                "WHERE session_key = %s AND expire_date > %s",
                [self.session_key, connection.ops.adapt_datetimefield_value(timezone.now())],
            )
            row = cursor.fetchone()
        if row is None:
            self._session_key = None  # as the ORM store: expired or unknown
            return {}
        return self.decode(row[0])


def session_store_class():
    """The store ``ReadOnlySessionMiddleware`` opens sessions with."""
    if settings.SESSION_ENGINE == _DB_SESSIONS:
        return SessionStore
    return import_module(settings.SESSION_ENGINE).SessionStore


@cache
def _user_select(using: str):
    """(SQL, field attnames, converters) reading one user row by primary key,
    or None where the default manager filters (plain SQL would bypass it) or
    the model inherits another's table (its fields span two tables).
    The converters are the ORM's own for each column (a database's datetimes,
    booleans, JSON), as its compiler applies them."""
    model = get_user_model()
    manager = model._default_manager
    if type(manager).get_queryset is not models.Manager.get_queryset or model._meta.parents:
        return None
    connection = connections[using]
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    sql = (
        f"SELECT {', '.join(quote(f.column) for f in fields)} "  # noqa: S608 (the model's columns)
        f"FROM {quote(model._meta.db_table)} WHERE {quote(model._meta.pk.column)} = %s"
    )
    converters = []
    for i, field in enumerate(fields):
        col = field.get_col(model._meta.db_table)
        found = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
        if found:
            converters.append((i, found, col))
    return sql, [f.attname for f in fields], converters


def _fetch_user(backend, user_id):
    """``backend.get_user(user_id)``, in plain SQL for ``ModelBackend``."""
    model = get_user_model()
    using = router.db_for_read(model)
    select = _user_select(using) if type(backend) is ModelBackend else None
    if select is None:
        return backend.get_user(user_id)
    sql, names, converters = select
    connection = connections[using]
    with connection.cursor() as cursor:
        # As the ORM sends it (a UUID's form differs by database).
        cursor.execute(sql, [model._meta.pk.get_db_prep_value(user_id, connection)])
        row = cursor.fetchone()
    if row is None:
        return None
    row = list(row)
    for i, found, col in converters:
        for convert in found:
            row[i] = convert(row[i], col, connection)
    user = model.from_db(using, names, row)
    return user if backend.user_can_authenticate(user) else None


def lookup_user(scope):
    """``channels.auth.get_user(scope)``, the same user or ``AnonymousUser``,
    with fewer costs (see the module's docstring). Runs on a thread."""
    session = scope["session"]
    if not isinstance(session, SessionStore):
        return get_user.func(scope)
    user = None
    try:
        user_id = user_session_key(session)
        backend_path = session[BACKEND_SESSION_KEY]
    except KeyError:
        pass
    else:
        if backend_path in settings.AUTHENTICATION_BACKENDS:
            user = _fetch_user(load_backend(backend_path), user_id)
            if hasattr(user, "get_session_auth_hash"):
                session_hash = session.get(HASH_SESSION_KEY)
                verified = session_hash and constant_time_compare(
                    session_hash, user.get_session_auth_hash()
                )
                if not verified:
                    session.flush()
                    user = None
    return user or AnonymousUser()
