"""System checks (``manage.py check``, and every start): the app's settings
are loaded as the runtime will load them, so a misspelt tool or agent class
is named at start, not by the first run that needs it (docs/deployment.md)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Warning, register
from django.core.exceptions import ImproperlyConfigured


@register()
def agent_settings(app_configs=None, **kwargs) -> list:
    """``AGENT_TOOLS``, ``AGENT_CLASS``, ``AGENT_MCP_SERVERS`` and the hosts
    every socket needs."""
    from sessions_app.runtime import registry
    from sessions_app.runtime.agents import get_agent

    problems = []
    registry.configured.cache_clear()
    try:
        registry.configured()
    except ImproperlyConfigured as exc:
        problems.append(
            Error(
                str(exc),
                hint="each entry is the dotted path of a Tool subclass (docs/agents.md)",
                id="sessions_app.E001",
            )
        )
    try:
        agent = get_agent()
    except ImproperlyConfigured as exc:
        problems.append(
            Error(
                f"AGENT_CLASS: {exc}",
                hint="scripted, openai, anthropic or a dotted class path (docs/agents.md)",
                id="sessions_app.E002",
            )
        )
    else:
        missing = [m for m in ("start", "resume") if not callable(getattr(agent, m, None))]
        if missing:
            problems.append(
                Error(
                    f"AGENT_CLASS {settings.AGENT_CLASS!r} has no "
                    + " or ".join(f"{m}()" for m in missing),
                    id="sessions_app.E002",
                )
            )
    problems += mcp_servers() + gate_deadlines() + notify_hooks()
    if not settings.DEBUG and not settings.ALLOWED_HOSTS:
        problems.append(
            Warning(
                "ALLOWED_HOSTS is empty and DEBUG is off: every WebSocket upgrade (and every "
                "page) is refused",
                hint="list the names the site is reached by in ALLOWED_HOSTS",
                id="sessions_app.W001",
            )
        )
    if "drf_spectacular_sidecar" not in settings.INSTALLED_APPS:
        problems.append(
            Warning(
                "drf_spectacular_sidecar is not in INSTALLED_APPS: the API docs page "
                "(/api/docs/) loads Swagger UI from its static files, and shows nothing",
                hint="add it, as docs/embedding.md lists the apps",
                id="sessions_app.W002",
            )
        )
    return problems


def mcp_servers() -> list:
    """Each of ``AGENT_MCP_SERVERS`` is well formed, and a stdio server's program
    is there to start. Nothing is started or reached here (this runs before
    every management command): a server that fails at run time is logged
    when its tools are listed, and a call of it is a tool error."""
    from sessions_app.runtime import mcp

    problems = []
    entries = getattr(settings, "AGENT_MCP_SERVERS", None) or {}
    if not isinstance(entries, dict):
        return [Error("AGENT_MCP_SERVERS must be a dict of servers", id="sessions_app.E003")]
    for name, entry in entries.items():
        problem = mcp.problem_with(name, entry) or mcp.cannot_start(entry)
        if problem is not None:
            problems.append(
                Error(
                    f"AGENT_MCP_SERVERS[{name!r}]: {problem}",
                    hint="a stdio command (a list) or a streamable HTTP url (docs/integrations.md)",
                    id="sessions_app.E003",
                )
            )
    return problems


def gate_deadlines() -> list:
    """``AGENT_GATE_DEADLINES``: a tool's name to its gates' seconds (0: none)."""
    per_tool = settings.AGENT_GATE_DEADLINES
    if isinstance(per_tool, dict) and all(
        isinstance(tool, str) and isinstance(seconds, int | float) and seconds >= 0
        for tool, seconds in per_tool.items()
    ):
        return []
    return [
        Error(
            f"AGENT_GATE_DEADLINES must map tool names to seconds (0 or more), not {per_tool!r}",
            hint='for example {"terminal": 300} (docs/deployment.md)',
            id="sessions_app.E004",
        )
    ]


def notify_hooks() -> list:
    """``AGENT_NOTIFY``: each hook loads, and its links have an address."""
    from django.utils.module_loading import import_string

    problems = []
    for path in settings.AGENT_NOTIFY:
        try:
            hook = import_string(path)
        except ImportError as exc:
            hook, why = None, str(exc)
        else:
            why = "it is not callable"
        if not callable(hook):
            problems.append(
                Error(
                    f"AGENT_NOTIFY: cannot use {path!r}: {why}",
                    hint="dotted paths of callables taking a Notice (docs/gates.md)",
                    id="sessions_app.E005",
                )
            )
    if settings.AGENT_NOTIFY and not settings.AGENT_PUBLIC_URL.startswith(("http://", "https://")):
        problems.append(
            Error(
                "AGENT_NOTIFY is on but AGENT_PUBLIC_URL is not the site's address: the links "
                "a notice carries would not open",
                hint="AGENT_PUBLIC_URL=https://agents.example.com (docs/deployment.md)",
                id="sessions_app.E005",
            )
        )
    return problems
