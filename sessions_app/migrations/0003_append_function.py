"""PostgreSQL: ``sessions_append``, the append as one server-side statement.

An append is lock the session row, check the run is still held, bump the head,
insert the events. Sent as separate statements that is five round trips with
the session row locked between them; as this function it is one, and a
streaming run's append (outside any other transaction) commits in it. Each
statement in a volatile PL/pgSQL function takes a fresh snapshot under READ
COMMITTED, so the guard, read after the lock, sees a cancel or takeover that
committed while it waited. Other databases append from Python (``events.py``).
"""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION sessions_append(
    p_session text, p_run text, p_worker text,
    p_kinds text[], p_run_ids text[], p_datas text[], p_at timestamptz
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n integer := cardinality(p_kinds);
    h bigint;
BEGIN
    PERFORM 1 FROM sessions_app_agentsession WHERE id = p_session FOR UPDATE;
    IF NOT FOUND THEN
        RETURN -1;  -- the session is gone
    END IF;
    IF p_worker IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM sessions_app_run
        WHERE id = p_run AND status = 'running' AND worker = p_worker
    ) THEN
        RETURN -2;  -- the run was cancelled, finished or taken over
    END IF;
    UPDATE sessions_app_agentsession SET head = head + n, updated_at = p_at
        WHERE id = p_session RETURNING head INTO h;
    INSERT INTO sessions_app_event (session_id, seq, kind, run_id, data, created_at)
        SELECT p_session, h - n + i, p_kinds[i], p_run_ids[i], p_datas[i]::jsonb, p_at
        FROM generate_subscripts(p_kinds, 1) AS i;
    RETURN h;
END
$$;
"""

DROP = "DROP FUNCTION IF EXISTS sessions_append(text, text, text, text[], text[], text[], timestamptz);"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTION)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0002_connection_seen_at")]

    operations = [migrations.RunPython(create, drop)]
