"""App configuration."""

from django.apps import AppConfig
from django.db import transaction


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Function-level: an AppConfig module is imported before the models
        # are ready, and these modules import the models.
        from django.contrib.auth.signals import user_logged_out
        from django.db.models.signals import post_delete

        from sessions_app import checks  # noqa: F401 (registers the system checks)
        from sessions_app.access.rights import connect_signals
        from sessions_app.conf import install_defaults
        from sessions_app.models import AgentSession
        from sessions_app.runtime import mcp, registry, runs, tasks
        from sessions_app.server import db_limits, tracing

        # A project embedding the app sets only the settings it changes.
        install_defaults()
        runs.set_enqueue(tasks.enqueue_run)
        # MCP servers' tools join the registry (a hook: mcp builds on it).
        registry.add_source(mcp.tools, mcp.refresh)
        connect_signals()
        db_limits.connect()
        tracing.configure()
        post_delete.connect(
            _remove_workspace, sender=AgentSession, dispatch_uid="sessions_app.workspace"
        )
        user_logged_out.connect(_close_sockets_at_logout, dispatch_uid="sessions_app.logout")


def _close_sockets_at_logout(sender, request, user, **kwargs) -> None:
    """A logout closes the sockets of its session cookie (its tabs show "Signed
    out"): sent before the session is flushed, while its key is known."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        from sessions_app import fanout  # imported by ready(), after the models

        fanout.publish_logged_out(key)


def _remove_workspace(sender, instance, **kwargs) -> None:
    """A deleted session's workspace goes with it, on every path that deletes
    one (the API, the admin, retention, a cascade from its owner), once the
    deletion commits."""
    from sessions_app.runtime.tools import remove_workspace  # after the models

    session_id = instance.pk
    transaction.on_commit(lambda: remove_workspace(session_id), robust=True)
