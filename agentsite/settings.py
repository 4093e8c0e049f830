"""Settings for both profiles.

With no environment at all this is the embedded default: a SQLite file, the
in-memory channel layer and runs executed inside the server process. Setting
``DATABASE_URL`` and ``REDIS_URL`` switches to the production profile:
PostgreSQL, the Redis channel layer and separate run workers
(``manage.py run_agent_worker``).
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from agentsite.env import app as _app
from agentsite.env import env_bool as _env_bool
from agentsite.env import env_int as _env_int
from agentsite.env import env_json as _env_json
from agentsite.env import env_list as _env_list
from agentsite.env import env_url as _env_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AGENT_VAR_DIR", BASE_DIR / "var"))


# Off unless asked for: ./scripts/run asks for it (and binds loopback).
DEBUG = _env_bool("DEBUG", False)

# SECRET_KEY from the environment, or the file ./scripts/run creates (0600)
# for development. Importing the settings writes no file.
if os.environ.get("SECRET_KEY"):
    SECRET_KEY = os.environ["SECRET_KEY"]
elif (VAR_DIR / "secret_key").is_file():
    SECRET_KEY = (VAR_DIR / "secret_key").read_text().strip()
else:
    raise ImproperlyConfigured(
        f"SECRET_KEY is not set and {VAR_DIR / 'secret_key'} does not exist: "
        "set SECRET_KEY (production) or start the app once with ./scripts/run"
    )

ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_tasks",
    "django_tasks_db",
    "sessions_app",
]

MIDDLEWARE = [
    "sessions_app.server.outages.UnavailableMiddleware",  # a 503, not a 500 that stays
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "sessions_app.server.security.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "agentsite.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = None
ASGI_APPLICATION = "agentsite.asgi.application"

# --- Database ---------------------------------------------------------------

_sqlite_default = f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
# Persistent connections (checked before reuse): a server process sends all
# its database work through one thread, and opening a PostgreSQL connection
# per query would cost more than the query.
DATABASES = {
    "default": dj_database_url.parse(
        _env_url("DATABASE_URL", _sqlite_default),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # IMMEDIATE: a writer takes the lock when it begins, so two appenders
        # queue on the busy timeout instead of deadlocking on a lock upgrade.
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not :memory:, so a daphne subprocess started by the tests shares
    # it; per process, so two test runs on one machine never share one.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{os.getpid()}"}
    # Behind a transaction-mode pooler (PgBouncer's pool_mode = transaction) a
    # connection is the server's only for one transaction: no server-side
    # cursors (Django's own flag), and gate wake-ups do not LISTEN
    # (runtime/wakeups.py). Django's psycopg cursors bind on the client, so
    # no statement is prepared on the server.
    _pool_mode = os.environ.get("DATABASE_POOL_MODE", "session")
    if _pool_mode not in ("session", "transaction"):
        raise ImproperlyConfigured(
            f"DATABASE_POOL_MODE={_pool_mode!r} is neither 'session' nor 'transaction'"
        )
    if _pool_mode == "transaction":
        DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
IS_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")

# --- Channel layer ----------------------------------------------------------

# One Redis URL, or several separated by commas: the channel layer shards its
# groups and its processes' channels across them by consistent hash (as
# channels_redis's ``hosts`` does); the throttles' cache lives on the first.
REDIS_URL = _env_url("REDIS_URL")
REDIS_URLS = [url.strip() for url in REDIS_URL.split(",") if url.strip()]
if REDIS_URL and not REDIS_URLS:
    raise ImproperlyConfigured(f"REDIS_URL={REDIS_URL!r} names no Redis URL")
# How long a channel-layer group membership lives unless its socket renews it
# (every third of this): the bound on what a killed process leaves in Redis.
CHANNEL_GROUP_EXPIRY = _env_int("CHANNEL_GROUP_EXPIRY", 300 if REDIS_URL else 86400)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels_redis's layer, receiving a server's messages in batches.
            "BACKEND": "sessions_app.fanout.layers.BatchReceiveRedisChannelLayer",
            "CONFIG": {
                # A host that stops answering fails its calls after these
                # (seconds) instead of stalling the process's publisher; the
                # read timeout is above the layer's 5 s blocking pop.
                "hosts": [
                    {"address": url, "socket_connect_timeout": 2, "socket_timeout": 15}
                    for url in REDIS_URLS
                ],
                "prefix": os.environ.get("CHANNELS_PREFIX", "asgi"),
                # A socket that falls behind a fast stream loses group messages
                # past this; the consumer refills holes from the log.
                "capacity": 5000,
                "expiry": 60,
                "group_expiry": CHANNEL_GROUP_EXPIRY,
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            # Channels' in-memory layer without its per-operation sweep of
            # every channel (sessions_app/fanout/layers.py).
            "BACKEND": "sessions_app.fanout.layers.LocalChannelLayer",
            "CONFIG": {
                "capacity": 5000,
                "expiry": 60,
                "group_expiry": CHANNEL_GROUP_EXPIRY,
            },
        }
    }

# --- Runs -------------------------------------------------------------------

# "embedded": runs execute in the server process (a thread pool fed from the
# event loop). "worker": runs go through django-tasks-db's durable queue and
# execute in `manage.py run_agent_worker` processes.
AGENT_RUNNER = os.environ.get("AGENT_RUNNER", "worker" if REDIS_URL else "embedded")
if AGENT_RUNNER not in ("embedded", "worker"):
    # Read in one place, here: a typo must not quietly run runs in-process.
    raise ImproperlyConfigured(f"AGENT_RUNNER must be 'embedded' or 'worker', not {AGENT_RUNNER!r}")
if AGENT_RUNNER == "worker":
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
else:
    TASKS = {"default": {"BACKEND": "sessions_app.runtime.embedded.EmbeddedBackend"}}

AGENT_CLASS = _app("AGENT_CLASS")
AGENT_SYSTEM_PROMPT = _app("AGENT_SYSTEM_PROMPT")
AGENT_WEBSOCKET_PREFIX = _app("AGENT_WEBSOCKET_PREFIX")
# Comma-separated dotted paths of Tool classes (docs/agents.md, "Adding a tool").
AGENT_TOOLS = _env_list("AGENT_TOOLS", _app("AGENT_TOOLS"))
# MCP servers as tools, as JSON (docs/integrations.md, "MCP").
AGENT_MCP_SERVERS = _env_json("AGENT_MCP_SERVERS", _app("AGENT_MCP_SERVERS"))
AGENT_MCP_CALL_SECONDS = _app("AGENT_MCP_CALL_SECONDS")
AGENT_MCP_ASK_SECONDS = _app("AGENT_MCP_ASK_SECONDS")
# A gate's deadline, and per tool as JSON: '{"terminal": 300}' (docs/deployment.md).
AGENT_GATE_DEADLINE_SECONDS = _app("AGENT_GATE_DEADLINE_SECONDS")
AGENT_GATE_DEADLINES = _env_json("AGENT_GATE_DEADLINES", _app("AGENT_GATE_DEADLINES"))
# Telling a person a gate waits (docs/gates.md): hooks, comma-separated; the mail's SMTP.
AGENT_NOTIFY = _env_list("AGENT_NOTIFY", _app("AGENT_NOTIFY"))
AGENT_NOTIFY_DELAY_SECONDS = _app("AGENT_NOTIFY_DELAY_SECONDS")
AGENT_NOTIFY_LINK_SECONDS = _app("AGENT_NOTIFY_LINK_SECONDS")
AGENT_PUBLIC_URL = _app("AGENT_PUBLIC_URL")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = _env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = _env_int("EMAIL_TIMEOUT", 30)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "agents@localhost")
# The access log, and the proxies whose X-Forwarded-For it believes (comma-separated).
AGENT_ACCESS_LOG = _app("AGENT_ACCESS_LOG")
AGENT_TRUSTED_PROXIES = _env_list("AGENT_TRUSTED_PROXIES", _app("AGENT_TRUSTED_PROXIES"))
AGENT_WORKER_METRICS_PORT = _app("AGENT_WORKER_METRICS_PORT")
AGENT_WORKER_METRICS_HOST = _app("AGENT_WORKER_METRICS_HOST")
AGENT_WORKSPACES = Path(os.environ.get("AGENT_WORKSPACES", VAR_DIR / "workspaces"))
# A run's lease, renewed while it works; lease + sweep bound a kill -9's stall.
AGENT_LEASE_SECONDS = _app("AGENT_LEASE_SECONDS")
AGENT_SWEEP_SECONDS = _app("AGENT_SWEEP_SECONDS")
# A run whose step took its worker down this many times finishes "error".
AGENT_RUN_MAX_CRASHES = _app("AGENT_RUN_MAX_CRASHES")
# How long a run's task may wait for a worker to take it before it is queued again.
AGENT_PICKUP_SECONDS = _app("AGENT_PICKUP_SECONDS")
AGENT_TEST_PICKUP_HOLD = _app("AGENT_TEST_PICKUP_HOLD")
AGENT_TEST_HOLDS = _app("AGENT_TEST_HOLDS")
# PostgreSQL: a lock waited for, a transaction left idle, at most this long.
AGENT_DB_LOCK_TIMEOUT_SECONDS = _app("AGENT_DB_LOCK_TIMEOUT_SECONDS")
AGENT_DB_IDLE_IN_TRANSACTION_SECONDS = _app("AGENT_DB_IDLE_IN_TRANSACTION_SECONDS")
# Runs one process executes at once (threads of its run pool), in a worker and
# in the embedded server alike. Each executing run holds one database
# connection while it works: see docs/deployment.md on sizing.
AGENT_WORKER_CONCURRENCY = _app("AGENT_WORKER_CONCURRENCY")
# The runs of one process commit their events together: whoever is committing
# takes every append waiting (sessions_app/log/group_commit.py). One durable flush
# per batch instead of per token; off, each append commits alone.
AGENT_GROUP_COMMIT = os.environ.get("AGENT_GROUP_COMMIT", "1") != "0"
# Runs one user may have executing at once, across all their sessions; more
# wait as "queued" (0: no limit). Parked gates do not count.
AGENT_USER_MAX_RUNS = _app("AGENT_USER_MAX_RUNS")
# How long a stopped worker (SIGTERM) lets its runs reach their next checkpoint
# (where each is handed to another worker at once) before it stops what is
# left and hands it over from its last checkpoint.
AGENT_WORKER_GRACE_SECONDS = _app("AGENT_WORKER_GRACE_SECONDS")

OPENAI_BASE_URL = _app("OPENAI_BASE_URL")
OPENAI_API_KEY = _app("OPENAI_API_KEY")
OPENAI_MODEL = _app("OPENAI_MODEL")

ANTHROPIC_BASE_URL = _app("ANTHROPIC_BASE_URL")
ANTHROPIC_API_KEY = _app("ANTHROPIC_API_KEY")
ANTHROPIC_MODEL = _app("ANTHROPIC_MODEL")
ANTHROPIC_MAX_TOKENS = _app("ANTHROPIC_MAX_TOKENS")

# A socket checks the session's head this long after its last live event, and
# this often while idle, to refill a publication lost at the end of a burst.
AGENT_TAIL_SETTLE_SECONDS = _app("AGENT_TAIL_SETTLE_SECONDS")
AGENT_TAIL_PROBE_SECONDS = _app("AGENT_TAIL_PROBE_SECONDS")

# Sockets one user may have open on one server process; more are closed with
# 4429 (retryable) at once, before any database work.
AGENT_USER_MAX_SOCKETS = _app("AGENT_USER_MAX_SOCKETS")
AGENT_USER_MAX_QUEUED_RUNS = _app("AGENT_USER_MAX_QUEUED_RUNS")
AGENT_SESSION_MAX_RUNS = _app("AGENT_SESSION_MAX_RUNS")
AGENT_WORKSPACE_MAX_BYTES = _app("AGENT_WORKSPACE_MAX_BYTES")
AGENT_WORKSPACE_MAX_FILES = _app("AGENT_WORKSPACE_MAX_FILES")
AGENT_USER_WORKSPACES_MAX_BYTES = _app("AGENT_USER_WORKSPACES_MAX_BYTES")
AGENT_MAX_MESSAGE_CHARS = _app("AGENT_MAX_MESSAGE_CHARS")
AGENT_RETAIN_CONNECTIONS_DAYS = _app("AGENT_RETAIN_CONNECTIONS_DAYS")
AGENT_API_RATE = _app("AGENT_API_RATE")
AGENT_API_SEND_RATE = _app("AGENT_API_SEND_RATE")
AGENT_PUBLIC_API_DOCS = _app("AGENT_PUBLIC_API_DOCS")
AGENT_PATCH_FAILURES = _app("AGENT_PATCH_FAILURES")
if AGENT_PATCH_FAILURES not in ("refuse", "warn"):
    raise ImproperlyConfigured("AGENT_PATCH_FAILURES must be 'refuse' or 'warn'")

# Flow control per socket: stop sending past this many unread bytes, close
# (4408, retryable) a client that read nothing for this long.
AGENT_SEND_BUFFER_BYTES = _app("AGENT_SEND_BUFFER_BYTES")
AGENT_SLOW_CONSUMER_SECONDS = _app("AGENT_SLOW_CONSUMER_SECONDS")
AGENT_SSE_HEARTBEAT_SECONDS = _app("AGENT_SSE_HEARTBEAT_SECONDS")
# API keys (sessions_app.access.tokens) expire this many days after they are made (0: never).
AGENT_TOKEN_DAYS = _app("AGENT_TOKEN_DAYS")

# Retention (docs/architecture.md, "Retention"). Off when unset or 0. The streamed
# deltas of a run whose text is in its assistant.message are deleted this many
# days after the run finished (the transcript keeps every message, tool call
# and result, and approval); whole sessions untouched for this many days, with
# no unfinished run, are deleted. Applied by the sweeper (hourly) and by
# `manage.py apply_retention`.
AGENT_RETAIN_DELTAS_DAYS = _app("AGENT_RETAIN_DELTAS_DAYS")
AGENT_RETAIN_SESSIONS_DAYS = _app("AGENT_RETAIN_SESSIONS_DAYS")
AGENT_RETENTION_INTERVAL_SECONDS = _app("AGENT_RETENTION_INTERVAL_SECONDS")

# /metrics (Prometheus) is for staff users, or for a scraper that sends
# `Authorization: Bearer <this>` when it is set.
AGENT_METRICS_TOKEN = _app("AGENT_METRICS_TOKEN")

# Test hooks in the browser client (fault injection); never on in production.
AGENT_TEST_HOOKS = _app("AGENT_TEST_HOOKS")

# --- Auth, i18n, static -----------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# The ASGI app serves /static/ itself unless SERVE_STATIC=0 (a proxy serves
# the collected files from STATIC_ROOT instead).
SERVE_STATIC = _env_bool("SERVE_STATIC", True)

REST_FRAMEWORK = {
    # The browser's session cookie (CSRF on writes), or for programs a token
    # (`Authorization: Token …`; made in the admin, through POST /api/tokens/
    # or with `manage.py issue_token USER`; kept as hashes).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "sessions_app.access.tokens.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "sessions_app.web.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # The throttles' client address: the peer's (0), or behind N proxies that
    # each *set* X-Forwarded-For (deploy/nginx sets it to $remote_addr) the
    # N-th value from its end. Never the whole header, which a client writes.
    "NUM_PROXIES": _env_int("NUM_PROXIES", 0),
}

# The throttles count in the cache: in production one cache for every process
# (Redis), so two daphnes allow a rate once, not twice. (Embedded: one process.)
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URLS[0],
            "KEY_PREFIX": os.environ.get("CHANNELS_PREFIX", "asgi") + "-cache",
        }
    }

# The app's schema and docs views carry their own title and hook
# (sessions_app/web/openapi.py); these are for `manage.py spectacular` and the
# site-wide Swagger UI source.
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent sessions API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The SSE stream is a plain async view: its path is added by a hook.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "sessions_app.web.openapi.add_to_schema",
    ],
}

# HTTPS=1 when the site is served over HTTPS (directly or behind a proxy):
# redirects, secure cookies, HSTS. Off by default so that the loopback demo
# and the tests work over plain HTTP; `manage.py check --deploy` warns.
if _env_bool("HTTPS", False):
    SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT", True)
    # The probes and the scrape are asked of each process directly, over
    # plain HTTP on the host (docs/deploy.md): no redirect for them.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    # Both are hard to undo (browsers and preload lists keep them for
    # months): opt-in, never implied by HTTPS=1.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
    SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD", False)
# Checks the operator has decided on, by id (docs/deploy.md: HSTS for the
# subdomains and the preload list are the domain's decision, not the app's).
SILENCED_SYSTEM_CHECKS = _env_list("SILENCED_SYSTEM_CHECKS", [])
# Trust X-Forwarded-Proto only behind a proxy that sets it (and strips what
# clients send): otherwise any client could claim HTTPS.
if _env_bool("TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# LOG_FORMAT=json: one JSON object per line, with each socket's connection id,
# session id, first frame and close code (sessions_app/server/logs.py).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be 'text' or 'json', not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "sessions_app.server.logs.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)-8s %(name)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    # One handler, the root's (it replaces the one daphne's command line sets
    # up): the app's lines and daphne's own are written once each, in one format.
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        "sessions_app": {"level": os.environ.get("LOG_LEVEL", "INFO")},
        # Named here so that Django's own console handler (DEBUG) goes: its
        # lines reach the root handler once.
        "django": {"level": "INFO"},
        # A line per task state in the run workers: only what goes wrong
        # (the backport's logger; on Django 6, Django's own).
        "django_tasks": {"level": "WARNING"},
        "django.tasks": {"level": "WARNING"},
    },
}

# Start the embedded runtime (recovery + sweeper) with the server. Tests that
# drive the consumer in-process turn this off and start what they need.
AGENT_RUNTIME_AUTOSTART = _app("AGENT_RUNTIME_AUTOSTART")
