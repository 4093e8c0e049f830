"""Conversation branches: a run's parent and the message it answers, the
session's active leaf, and gates cancelled with their branch.

Runs that existed before form one path, in the order they were sent: each
follows the one before it, and the session's leaf is its last run.
"""

from django.db import migrations, models


def linear_history(apps, schema_editor):
    Run = apps.get_model("sessions_app", "Run")
    AgentSession = apps.get_model("sessions_app", "AgentSession")
    previous: dict[str, str] = {}
    for run_id, session_id in Run.objects.order_by("session_id", "message_seq").values_list(
        "id", "session_id"
    ):
        parent = previous.get(session_id)
        if parent is not None:
            Run.objects.filter(id=run_id).update(parent_id=parent)
        previous[session_id] = run_id
    for session_id, leaf in previous.items():
        AgentSession.objects.filter(id=session_id).update(leaf_run_id=leaf)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0008_connection_opened_at_default"),
    ]

    operations = [
        migrations.AddField(
            model_name="agentsession",
            name="leaf_run_id",
            field=models.CharField(blank=True, default="", max_length=40),
        ),
        migrations.AddField(
            model_name="run",
            name="parent_id",
            field=models.CharField(blank=True, max_length=40, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="answers_id",
            field=models.CharField(blank=True, max_length=40, null=True),
        ),
        migrations.AlterField(
            model_name="approvalrequest",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "pending"),
                    ("approved", "approved"),
                    ("denied", "denied"),
                    ("cancelled", "cancelled"),
                ],
                default="pending",
                max_length=10,
            ),
        ),
        migrations.RunPython(linear_history, migrations.RunPython.noop),
    ]
