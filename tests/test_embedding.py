"""sessions_app in a second Django project, installed the way docs/embedding.md
says: from its wheel (built here: templates, static files and migrations
come from it, not from this checkout), mounted under a prefix, with its own
settings, URLs and asgi.py, its own pages beside the app's, its own
database; daphne, a real socket, a run through an approval gate."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.harness import _LISTEN, ROOT, Process, WsClient, daphne_endpoint
from tests.support.clients import http_get

# The files a team writes, as docs/embedding.md shows them (kept in step by
# test_the_document_shows_these_files).
SETTINGS = """
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "host-project-secret-for-the-embedding-test"
# startproject's own defaults, kept (the embedding-test's: localhost only)
DEBUG = True  # embedding-test
ALLOWED_HOSTS = []  # embedding-test

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "shop",  # the project's own app
    # sessions_app and what it builds on:
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_tasks",
    "sessions_app",
]

MIDDLEWARE = [
    "sessions_app.server.outages.UnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "sessions_app.server.security.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "hostsite.urls"
ASGI_APPLICATION = "hostsite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The project's own templates; the app's come with it (APP_DIRS), all
        # under sessions_app/.
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

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "host.sqlite3",
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CHANNEL_LAYERS = {"default": {"BACKEND": "sessions_app.fanout.layers.LocalChannelLayer"}}
TASKS = {"default": {"BACKEND": "sessions_app.runtime.embedded.EmbeddedBackend"}}
# The app's API views set their own authentication, permissions and errors;
# the project keeps its defaults (here, open) for its own API.
REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# The app's static files come with it, under /static/sessions_app/.
STATIC_URL = "/static/"
SERVE_STATIC = True
LOGIN_URL = "/accounts/login/"
# Where a sign-in lands (Django's default, /accounts/profile/, is no page).
LOGIN_REDIRECT_URL = "/agents/"
USE_TZ = True

# The app's own settings: only what differs from its defaults (sessions_app/conf.py).
AGENT_WORKSPACES = BASE_DIR / "agent-workspaces"
# The app's tools, and the project's own (docs/agents.md, "Adding a tool").
AGENT_TOOLS = [
    "sessions_app.runtime.tools.WriteFile",
    "sessions_app.runtime.tools.Terminal",
    "shop.tools.Shout",
]
# The app's sockets under the same prefix as its pages (urls.py).
AGENT_WEBSOCKET_PREFIX = "agents/"
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

from shop.views import shop

urlpatterns = [
    path("shop/", shop),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    # The app under a prefix of the project's choosing: its pages and the
    # client find every route from what the pages say.
    path("agents/api/", include("sessions_app.web.api_urls")),
    path("agents/", include("sessions_app.urls")),
]
"""

ASGI = """
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostsite.settings")
django_asgi_app = get_asgi_application()

from sessions_app.asgi import application_for  # noqa: E402

from django.urls import path  # noqa: E402
from shop.consumers import EchoConsumer  # noqa: E402  (the project's own socket)

application = application_for(
    django_asgi_app, websocket_routes=[path("ws/echo/", EchoConsumer.as_asgi())]
)
"""

ECHO = """
import json

from channels.generic.websocket import WebsocketConsumer


class EchoConsumer(WebsocketConsumer):
    def connect(self):
        self.accept()

    def receive(self, text_data=None, bytes_data=None):
        user = self.scope["user"].get_username() or "anonymous"
        self.send(text_data=json.dumps({"user": user, "echo": text_data}))
"""

# The project's own base.html and login page: the app's pages must not use them.
HOST_BASE = "<!doctype html><title>{% block title %}{% endblock %}</title>the shop's base"
HOST_LOGIN = """<!doctype html><p>the shop's own sign-in page</p>
<form method="post">{% csrf_token %}{{ form.as_p }}<button type="submit">Sign in</button></form>
"""

# The project's own tool, gated like the app's.
SHOUT = """
from sessions_app.runtime.registry import Tool


class Shout(Tool):
    name = "shout"
    description = "Say TEXT in capitals."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }

    def execute(self, args, workspace):
        return True, args["text"].upper()
"""

SHOP_VIEWS = """
from django.http import HttpResponse


def shop(request):
    return HttpResponse("the host project's own page")
"""

MAKE_USER = """
import django
django.setup()
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
user = get_user_model().objects.create_user("host-user", password="host-pass-1")
client = Client()
client.force_login(user)
print(settings.SESSION_COOKIE_NAME + "=" + client.cookies[settings.SESSION_COOKIE_NAME].value)
"""


def _write(base: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> Path:
    """The app built as a wheel and installed (without its dependencies,
    which this environment has) into a directory of its own."""
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: a build writes build/ and *.egg-info beside its
    # source, and the other profile's suite may be building at this moment.
    source = out / "source"
    junk = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("sessions_app", "static", "templates"):
        shutil.copytree(ROOT / name, source / name, ignore=junk)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(out / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (out / "dist").glob("agent_sessions-*.whl")
    site = out / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


def _env(base: Path, site: Path) -> dict[str, str]:
    import os

    # Only the host project's settings: nothing of agentsite's environment,
    # and the app from the wheel (first on the path), never from this checkout.
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    return {
        **env,
        "PYTHONPATH": f"{base}{os.pathsep}{site}",
        "DJANGO_SETTINGS_MODULE": "hostsite.settings",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def host_project(tmp_path, installed_wheel):
    base = tmp_path / "host"
    _write(
        base,
        {
            "hostsite/__init__.py": "",
            "hostsite/settings.py": SETTINGS,
            "hostsite/urls.py": URLS,
            "hostsite/asgi.py": ASGI,
            "shop/__init__.py": "",
            "shop/views.py": SHOP_VIEWS,
            "shop/consumers.py": ECHO,
            "shop/tools.py": SHOUT,
            "templates/base.html": HOST_BASE,
            "templates/registration/login.html": HOST_LOGIN,
        },
    )
    env = _env(base, installed_wheel)
    where = subprocess.run(
        [sys.executable, "-c", "import sessions_app.conf as c; print(c.__file__, c.STATIC_DIR)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=base,
    )
    assert where.stdout.split() == [
        str(installed_wheel / "sessions_app" / "conf.py"),
        str(installed_wheel / "sessions_app" / "static"),
    ], where.stderr
    # Run from the project's directory: this checkout is not on the path.
    for args in (["-m", "django", "migrate", "--noinput"], ["-m", "django", "check"]):
        done = subprocess.run(
            [sys.executable, *args], env=env, capture_output=True, text=True, cwd=base
        )
        assert done.returncode == 0, done.stdout + done.stderr
    made = subprocess.run(
        [sys.executable, "-c", MAKE_USER],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=base,
    )
    cookie = made.stdout.strip().splitlines()[-1]
    server = Process(
        [sys.executable, "-m", "daphne", "-e", daphne_endpoint(0), "hostsite.asgi:application"],
        env,
        "host-daphne",
        tmp_path,
        cwd=base,
    ).start()
    port = int(server.wait_for_log(_LISTEN).group(1))
    try:
        yield base, f"http://127.0.0.1:{port}", cookie
    finally:
        server.stop()


def _get(url: str, cookie: str | None = None) -> tuple[int, str]:
    return http_get(url, cookie=cookie)


async def test_a_second_project_runs_a_session_through_an_approval(host_project):
    """In the host project: its own pages, login and socket and the app's pages
    (with their own base, scripts and styles), static files, API (signed in
    only, whatever the project's DRF defaults) and schema are served; a
    socket starts a session, the run parks at its gate, the approval runs the
    tool exactly once and the run ends."""
    base, http, cookie = host_project
    assert _get(http + "/shop/") == (200, "the host project's own page")
    assert "the shop's own sign-in page" in _get(http + "/accounts/login/")[1]
    status, page = _get(http + "/agents/", cookie)
    assert status == 200 and 'data-testid="new-session"' in page
    assert "/static/sessions_app/js/list.js" in page and "/static/sessions_app/css/app.css" in page
    assert "the shop's base" not in page
    # The client's routes, as the page gives them: every one under the prefix.
    urls = json.loads(html.unescape(re.search(r'data-urls="([^"]*)"', page).group(1)))
    assert urls == {
        "list": "/agents/",
        "session": "/agents/s/SESSION_ID/",
        "api_session": "/agents/api/sessions/SESSION_ID/",
        "ws_sessions": "/agents/ws/sessions/",
        "ws_list": "/agents/ws/list/",
    }
    assert _get(http + "/static/sessions_app/js/app.js")[0] == 200
    assert _get(http + "/static/sessions_app/js/client/urls.js")[0] == 200
    schema = json.loads(_get(http + "/agents/api/schema/?format=json", cookie)[1])
    # The app's own schema settings, with none in the host's: its title, the stream's path.
    assert schema["info"]["title"] == "Agent sessions API"
    assert "/agents/api/sessions/{session_id}/stream/" in schema["paths"]
    # The docs page loads Swagger UI from the site's own static files, no CDN.
    status, docs_page = _get(http + "/agents/api/docs/", cookie)
    assert status == 200 and "/static/drf_spectacular_sidecar/swagger-ui-dist/" in docs_page
    assert "cdn" not in docs_page.lower()
    bundle = re.search(r'src="([^"]*swagger-ui-bundle\.js)"', docs_page).group(1)
    assert _get(http + bundle)[0] == 200
    assert _get(http + "/agents/api/sessions/")[0] in (401, 403)

    echo = await WsClient.connect(http.replace("http", "ws") + "/ws/echo/", cookie)
    await echo.send_raw("hello")
    assert await echo.wait(lambda f: "echo" in f) == {"user": "host-user", "echo": "hello"}
    await echo.close()

    ws = await WsClient.connect(http.replace("http", "ws") + urls["ws_sessions"], cookie)
    session_id = (await ws.start(title="from the host"))["session_id"]
    await ws.request({"type": "send", "client_message_id": "m1", "text": "/write notes.txt hi"})
    asked = await ws.wait_event(lambda f: f["kind"] == "approval.requested")
    approval_id = asked["data"]["approval_id"]
    reply = await ws.request({"type": "decide", "approval_id": approval_id, "decision": "approve"})
    assert reply["type"] == "decide_ok"
    await ws.wait_event(lambda f: f["kind"] == "run.finished")
    kinds = [f["kind"] for f in ws.events()]
    assert kinds.count("tool.result") == 1
    await ws.close()
    written = list((base / "agent-workspaces").rglob("notes.txt"))
    assert [p.read_text() for p in written] == ["hi\n"]
    assert session_id in _get(http + "/agents/api/sessions/", cookie)[1]
    assert _get(http + f"/agents/s/{session_id}/", cookie)[0] == 200


def test_the_document_shows_these_files():
    """docs/embedding.md shows the settings, URLs and asgi.py this test uses."""
    doc = (ROOT / "docs" / "embedding.md").read_text()
    for text in (SETTINGS, URLS, ASGI, ECHO):
        for line in textwrap.dedent(text).strip().splitlines():
            if line.strip() and "embedding-test" not in line and "shop" not in line:
                assert line in doc, line
