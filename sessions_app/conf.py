"""The app's settings and their defaults, for projects that embed it.

``agentsite/settings.py`` sets every one of these from the environment; a
project that adds ``sessions_app`` to its own settings (docs/embedding.md)
sets only what it wants to change. ``install_defaults`` (called from the
app's ``ready``) gives every setting the project left out its default, so the
code reads ``settings.AGENT_…`` in one way everywhere (and tests override them
with Django's own tools), the way django-appconf does it.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

# The app's pages and its browser client, each under a ``sessions_app/``
# folder of their own (templates/sessions_app/, static/sessions_app/), so
# they never shadow a project's base.html, login page or /static/js/. A
# checkout keeps them at the repository's top; the wheel puts them inside the
# package (sessions_app/templates, sessions_app/static: pyproject.toml maps
# them), where APP_DIRS and staticfiles' app finder find them with no setting.
_PACKAGE = Path(__file__).resolve().parent


def _bundled(name: str) -> Path:
    installed = _PACKAGE / name
    return installed if installed.is_dir() else _PACKAGE.parent / name


TEMPLATES_DIR = _bundled("templates")
STATIC_DIR = _bundled("static")


DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant in a web chat. You have a private working "
    "directory (the workspace) and two tools. write_file appends a line of "
    "text to a file in the workspace; paths are relative to it. terminal runs "
    "one of echo, ls, cat, wc, date or pwd in the workspace, without a shell "
    "(no pipes, redirections or globbing) and only on paths inside it. The "
    "user approves or denies every tool call; a denied call answers 'denied'."
)


# Every app setting but the paths, with its default: read here by projects
# that embed the app, and by agentsite/settings.py under the environment.
DEFAULTS: dict[str, object] = {
    # "embedded": runs execute in the server process; "worker": in
    # `manage.py run_agent_worker` (set TASKS to django_tasks_db's backend).
    "AGENT_RUNNER": "embedded",
    # "scripted", "openai", "anthropic" or an agent class's dotted path (docs/agents.md).
    "AGENT_CLASS": "scripted",
    # The system prompt of the model backends (openai, anthropic).
    "AGENT_SYSTEM_PROMPT": DEFAULT_SYSTEM_PROMPT,
    # Where the app's sockets are mounted: "" serves /ws/sessions/ and
    # /ws/list/; "agents/" serves /agents/ws/sessions/ (the pages say so).
    "AGENT_WEBSOCKET_PREFIX": "",
    # The tools agents may ask for: Tool classes by dotted path (runtime.registry).
    "AGENT_TOOLS": [
        "sessions_app.runtime.tools.WriteFile",
        "sessions_app.runtime.tools.Terminal",
        # A form the agent asks a person (runtime.ask_user; the scripted /ask).
        "sessions_app.runtime.ask_user.AskUser",
    ],
    # MCP servers whose tools join the registry (runtime.mcp, docs/integrations.md):
    # {"name": {"command": [...]} or {"url": "..."}, with "auto_approve": [...]}.
    "AGENT_MCP_SERVERS": {},
    # Telling a person their agent waits (runtime.notify, docs/gates.md): the
    # hooks, dotted paths of callables taking a Notice (off: none; the
    # built-in mail is "sessions_app.runtime.notify.send_email"), how long a
    # gate waits before it is told, and how long its link opens.
    "AGENT_NOTIFY": [],
    "AGENT_NOTIFY_DELAY_SECONDS": 120.0,
    "AGENT_NOTIFY_LINK_SECONDS": 86400.0,
    # The site's address as people reach it (https://agents.example.com): the
    # links a notice carries start with it.
    "AGENT_PUBLIC_URL": "",
    # How long one MCP tool call may take before it is a tool error.
    "AGENT_MCP_CALL_SECONDS": 60.0,
    # How long a question an MCP server or ask_user asks during a call (runtime.questions)
    # waits for a person before it is cancelled; its worker thread waits too.
    "AGENT_MCP_ASK_SECONDS": 600.0,
    # How long a gate waits for a person before the server decides it
    # "expired" (runtime.gates; 0: no deadline), and per tool (name:
    # seconds, 0 for none), which wins over it.
    "AGENT_GATE_DEADLINE_SECONDS": 0.0,
    "AGENT_GATE_DEADLINES": {},
    # The access log (server.access_log): a line per request and socket,
    # with the client's address as a proxy on one of these forwards it.
    "AGENT_ACCESS_LOG": True,
    "AGENT_TRUSTED_PROXIES": ["127.0.0.1", "::1"],
    # A worker renews its runs' leases every third of this; a run whose lease
    # lapsed is taken over by another worker (docs/architecture.md, "Durable
    # runs"): lease + sweep bound the stall after a kill -9.
    "AGENT_LEASE_SECONDS": 3.0,
    "AGENT_SWEEP_SECONDS": 1.0,
    # A run whose step took its worker down this many times finishes "error".
    "AGENT_RUN_MAX_CRASHES": 3,
    "AGENT_PICKUP_SECONDS": 120.0,
    # PostgreSQL: how long a statement waits for a lock, and how long a
    # session may sit idle inside a transaction (server.db_limits; 0: off).
    "AGENT_DB_LOCK_TIMEOUT_SECONDS": 30.0,
    "AGENT_DB_IDLE_IN_TRANSACTION_SECONDS": 60.0,
    # Tests only: a worker holds a task it took while this file exists (the
    # window between taking a task and driving its run; run_agent_worker).
    "AGENT_TEST_PICKUP_HOLD": "",
    # Tests only: the folder where the scripted agent's ``/hold NAME`` looks
    # for the file NAME that releases it ("" : /hold is refused).
    "AGENT_TEST_HOLDS": "",
    "AGENT_WORKER_CONCURRENCY": 32,
    "AGENT_GROUP_COMMIT": True,
    "AGENT_USER_MAX_RUNS": 8,
    "AGENT_WORKER_GRACE_SECONDS": 20.0,
    # A run worker's own /metrics, /healthz and /readyz (0: not served).
    "AGENT_WORKER_METRICS_PORT": 0,
    "AGENT_WORKER_METRICS_HOST": "127.0.0.1",
    "AGENT_TAIL_SETTLE_SECONDS": 1.0,
    "AGENT_TAIL_PROBE_SECONDS": 30.0,
    "AGENT_USER_MAX_SOCKETS": 50,
    # Runs a user may have waiting to start (queued), across their sessions:
    # past it a send is refused (``too_many_runs``) rather than queued.
    "AGENT_USER_MAX_QUEUED_RUNS": 20,
    # Turns (runs) one session may hold: past it a send, regenerate or edit is
    # refused (``session_full``); a conversation that long goes on in a new one.
    "AGENT_SESSION_MAX_RUNS": 10_000,
    # One session's workspace: bytes of its files, and files plus directories.
    "AGENT_WORKSPACE_MAX_BYTES": 64 * 1024 * 1024,
    "AGENT_WORKSPACE_MAX_FILES": 1000,
    # Bytes of all of one user's workspaces together (0: no limit).
    "AGENT_USER_WORKSPACES_MAX_BYTES": 256 * 1024 * 1024,
    # The longest agent message (characters) the log keeps: what a model
    # streams past it is cut, and the message says so.
    "AGENT_MAX_MESSAGE_CHARS": 200_000,
    # Closed sockets' diagnostic rows are deleted after this many days (0: kept).
    "AGENT_RETAIN_CONNECTIONS_DAYS": 30.0,
    # REST API throttles (DRF rates: "N/second|minute|hour|day").
    "AGENT_API_RATE": "600/minute",
    "AGENT_API_SEND_RATE": "60/minute",
    # The OpenAPI schema and its docs page answer anonymous requests.
    "AGENT_PUBLIC_API_DOCS": False,
    # What a patch of a third-party internal that did not take hold does:
    # "refuse" (the server does not start) or "warn" (logged, counted, runs on).
    "AGENT_PATCH_FAILURES": "refuse",
    "AGENT_SEND_BUFFER_BYTES": 1024 * 1024,
    "AGENT_SLOW_CONSUMER_SECONDS": 10.0,
    # The SSE stream (GET …/stream/): a comment this often while idle (under
    # a proxy's read timeout), with a check of the head and the user's rights.
    "AGENT_SSE_HEARTBEAT_SECONDS": 15.0,
    # API keys expire this many days after they are made (0: never).
    "AGENT_TOKEN_DAYS": 90,
    "AGENT_RETAIN_DELTAS_DAYS": 0.0,
    "AGENT_RETAIN_SESSIONS_DAYS": 0.0,
    "AGENT_RETENTION_INTERVAL_SECONDS": 3600.0,
    "AGENT_METRICS_TOKEN": "",
    "AGENT_TEST_HOOKS": False,
    "AGENT_RUNTIME_AUTOSTART": True,
    "OPENAI_BASE_URL": "https://api.openai.com/v1",
    "OPENAI_API_KEY": "",
    "OPENAI_MODEL": "gpt-4o-mini",
    "ANTHROPIC_BASE_URL": "https://api.anthropic.com/v1",
    "ANTHROPIC_API_KEY": "",
    "ANTHROPIC_MODEL": "claude-sonnet-4-5",
    "ANTHROPIC_MAX_TOKENS": 4096,
}


def defaults() -> dict[str, object]:
    """Each setting's default. The paths follow VAR_DIR (``BASE_DIR/var``, or
    ``./var`` for a project without BASE_DIR) unless set."""
    var_dir = Path(
        getattr(settings, "VAR_DIR", None) or Path(getattr(settings, "BASE_DIR", ".")) / "var"
    )
    return {"VAR_DIR": var_dir, "AGENT_WORKSPACES": var_dir / "workspaces", **DEFAULTS}


def install_defaults() -> None:
    """Set every app setting the project did not set to its default."""
    for name, value in defaults().items():
        if not hasattr(settings, name):
            setattr(settings, name, value)
