"""Schema migrations that move data (sessions_app/migrations/)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("sessions_app", "0008_connection_opened_at_default")]
AFTER = [("sessions_app", "0009_branches")]


def test_runs_before_branches_become_one_path_in_the_order_they_were_sent(user):
    """0009: each existing run follows the run sent before it in its session,
    and the session's leaf is its last run; sessions do not mix."""
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Session, Run = (
        old.get_model("sessions_app", "AgentSession"),
        old.get_model("sessions_app", "Run"),
    )
    made = {}
    for name in ("a", "b"):
        s = Session.objects.create(id=f"s_{name}", owner_id=user.id)
        # Created out of order: the path follows message_seq, not creation.
        for seq in (5, 2, 9):
            Run.objects.create(
                id=f"run_{name}{seq}",
                session=s,
                client_message_id=f"m{seq}",
                text="x",
                message_seq=seq,
                status="finished",
            )
        made[name] = s
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    Session, Run = (
        new.get_model("sessions_app", "AgentSession"),
        new.get_model("sessions_app", "Run"),
    )
    for name in ("a", "b"):
        parents = dict(Run.objects.filter(session_id=f"s_{name}").values_list("id", "parent_id"))
        assert parents == {
            f"run_{name}2": None,
            f"run_{name}5": f"run_{name}2",
            f"run_{name}9": f"run_{name}5",
        }
        assert Session.objects.get(id=f"s_{name}").leaf_run_id == f"run_{name}9"
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


# NOT NULL columns from before the rule (migrations 0001-0010), each written
# by every release that ever existed: no older server can omit them.
BEFORE_THE_RULE = {
    "AgentSession.created_at",
    "AgentSession.updated_at",
    "AgentSession.epoch",
    "AgentSession.head",
    "AgentSession.earliest",
    "AgentSession.compacted_through",
    "AgentSession.status",
    "Event.data",
    "Run.status",
    "Run.created_at",
    "Run.state",
    "ApprovalRequest.args",
    "ApprovalRequest.status",
    "ApprovalRequest.created_at",
    "Connection.opened_at",
    "Connection.seen_at",
}


def test_every_new_not_null_column_has_a_database_default():
    """A column added NOT NULL carries a database default (``db_default``):
    during a rolling deploy the previous release's servers, which do not know
    the column, keep inserting rows (docs/deploy.md), and bench/ab.py runs an
    older revision's servers on the current schema."""
    from django.apps import apps
    from django.db.models import NOT_PROVIDED

    missing = []
    for model in apps.get_app_config("sessions_app").get_models():
        for field in model._meta.concrete_fields:
            name = f"{model.__name__}.{field.name}"
            defaulted = field.has_default() or getattr(field, "auto_now", False)
            defaulted = defaulted or getattr(field, "auto_now_add", False)
            if field.null or field.primary_key or not defaulted or name in BEFORE_THE_RULE:
                continue
            if field.db_default is NOT_PROVIDED:
                missing.append(name)
    assert missing == []


def test_plain_text_keys_become_hashes_that_still_sign_in(user):
    """0012: each key DRF's authtoken kept in plain text is stored as a hash
    and signs in as before; the plain table is emptied."""
    from tests.harness import key_works

    executor = MigrationExecutor(connection)
    executor.migrate([("sessions_app", "0011_db_defaults_for_rolling_deploys")])
    key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "user_id integer NOT NULL, created timestamp with time zone NOT NULL)"
            if connection.vendor == "postgresql"
            else "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "user_id integer NOT NULL, created datetime NOT NULL)"
        )
        cursor.execute(
            "INSERT INTO authtoken_token VALUES (%s, %s, %s)",
            [key, user.id, "2026-01-02 03:04:05+00:00"],
        )
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        assert key_works(key)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM authtoken_token")
            assert cursor.fetchone()[0] == 0
        # With the configured expiry, from the migration on (not for ever).
        from sessions_app.models import ApiToken

        (migrated,) = ApiToken.objects.filter(user=user)
        left = migrated.expires_at - timezone.now()
        assert timedelta(days=settings.AGENT_TOKEN_DAYS - 1) < left
        assert left <= timedelta(days=settings.AGENT_TOKEN_DAYS)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE authtoken_token")


def test_gate_kinds_come_out_of_their_hiding_places(user):
    """0017: a question's kind was its ``ask_`` prefix, an unknown outcome's
    the note its approval.requested carried; every other gate is an approval."""
    before = [("sessions_app", "0016_run_lease_generation")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Session, Run, Gate, Event = (
        old.get_model("sessions_app", name)
        for name in ("AgentSession", "Run", "ApprovalRequest", "Event")
    )
    s = Session.objects.create(id="s_k", owner_id=user.id)
    run = Run.objects.create(id="run_k", session=s, client_message_id="m", text="x", message_seq=1)
    for approval_id, call in (("ap_q", "ask_1"), ("ap_u", "call_u"), ("ap_a", "call_a")):
        Gate.objects.create(id=approval_id, session=s, run=run, tool_call_id=call, tool="t")
    note = "The worker stopped while this ran: run it again?"
    for seq, (approval_id, data) in enumerate(
        (("ap_u", {"note": note}), ("ap_a", {"note": "something else"})), 1
    ):
        Event.objects.create(
            session=s,
            seq=seq,
            kind="approval.requested",
            run_id=run.id,
            data={"approval_id": approval_id, **data},
            created_at=timezone.now(),
        )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    from sessions_app.models import ApprovalRequest

    kinds = dict(ApprovalRequest.objects.values_list("id", "kind"))
    assert kinds == {"ap_q": "question", "ap_u": "unknown_outcome", "ap_a": "approval"}
