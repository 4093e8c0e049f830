"""PostgreSQL: ``sessions_append_many``, several appends in one statement.

The group commit (``sessions_app/log/group_commit.py``) appends what a process's
runs have waiting in one transaction. As one ``sessions_append`` per request
that is a round trip per request with the batch's session rows locked between
them; as this function it is one round trip for the batch. Each request is
appended exactly as ``sessions_append`` does it (lock, guard, head, insert),
in the order given, and gets its own result: the new head, or -1 (session
gone) or -2 (run no longer held) for that request alone. ``p_counts[i]`` events
of the flat ``p_kinds``/``p_run_ids``/``p_datas`` belong to request ``i``.
"""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION sessions_append_many(
    p_sessions text[], p_runs text[], p_workers text[], p_counts integer[],
    p_kinds text[], p_run_ids text[], p_datas text[], p_at timestamptz
) RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    heads bigint[] := '{}';
    lo integer := 1;
    hi integer;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_sessions), 0) LOOP
        hi := lo + p_counts[i] - 1;
        heads := heads || sessions_append(
            p_sessions[i], p_runs[i], p_workers[i],
            p_kinds[lo:hi], p_run_ids[lo:hi], p_datas[lo:hi], p_at
        );
        lo := hi + 1;
    END LOOP;
    RETURN heads;
END
$$;
"""

DROP = (
    "DROP FUNCTION IF EXISTS sessions_append_many("
    "text[], text[], text[], integer[], text[], text[], text[], timestamptz);"
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTION)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0004_connection_refs_unconstrained")]

    operations = [migrations.RunPython(create, drop)]
