"""Testing an agent, a tool, or a site that embeds ``sessions_app``
(docs/agents.md, "Testing").

- ``FakeContext``: a ``RunContext`` in memory, for an agent's unit tests.
  It records what the agent does (deltas, messages, tool requests, sleeps,
  checkpoints) instead of writing a log, and round-trips ``state`` and
  tool arguments through JSON as the database does.
- pytest fixtures, with ``pytest_plugins = ["sessions_app.testing"]`` in the
  site's ``conftest.py`` (and pytest-django):

  - ``agent_server``: the site under daphne, in a process of its own on a
    free port of 127.0.0.1, on the test database (a file or a server: a
    SQLite database in memory cannot be shared with it). Runs execute as
    the site has them execute: in that process with the embedded runtime
    (the default); with ``AGENT_RUNNER=worker``, start run workers on the
    test database yourself. ``agent_server.http`` and ``.ws`` are its base
    URLs.
  - ``agent_user``: a user of the test database, with a password.
  - ``agent_client``: ``agent_user`` signed in on ``agent_server`` with a
    session cookie, as a browser is: ``get``, ``post`` (JSON, with the CSRF
    header) and ``headers`` for a WebSocket of your own.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import partial
from typing import Any

from sessions_app.runtime.base import Parked, ToolOutcome

try:
    import pytest
except ImportError:  # pragma: no cover (FakeContext needs no pytest)
    pytest = None  # type: ignore[assignment]


class FakeContext:
    """A RunContext in memory: records deltas, messages, tool requests, sleeps."""

    def __init__(
        self,
        text: str = "",
        *,
        session_id: str = "s_test",
        run_id: str = "run_test",
        state: dict[str, Any] | None = None,
        history: list[dict[str, str]] | None = None,
    ) -> None:
        self.text = text
        self.session_id = session_id
        self.run_id = run_id
        # A copy, as if loaded from the database: an agent mutating it in place
        # must not change the state a test resumes from again.
        self.state: dict[str, Any] = json.loads(json.dumps(state or {}))
        self._history = history or []
        self.deltas: list[str] = []
        self.messages: list[str] = []
        self.tool_requests: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        # Each step of several calls asked at once (``request_tools``).
        self.steps: list[list[tuple[str, dict[str, Any]]]] = []
        self.sleeps: list[float] = []
        self.calls: list[tuple[str, Any]] = []  # everything, in order
        self.delta_seen = threading.Event()  # set by every delta
        # The state saved at each checkpoint, as the runtime would save it.
        self.checkpoints: list[dict[str, Any]] = []

    def delta(self, text: str, *, checkpoint: bool = False) -> None:
        self.deltas.append(text)
        self.calls.append(("delta", text))
        self.delta_seen.set()
        if checkpoint:
            self.checkpoint()

    def message(self, text: str) -> None:
        self.messages.append(text)
        self.calls.append(("message", text))
        self.checkpoint()

    def checkpoint(self) -> None:
        self.checkpoints.append(json.loads(json.dumps(self.state)))

    def request_tool(self, tool: str, args: dict[str, Any], state: dict[str, Any]) -> None:
        # Round-trip through JSON like the runtime's database column would.
        state = json.loads(json.dumps(state))
        args = json.loads(json.dumps(args))
        self.tool_requests.append((tool, args, state))
        self.calls.append(("request_tool", (tool, args)))
        self.state = state
        raise Parked()

    def request_tools(self, calls: list[tuple[str, dict[str, Any]]], state: dict[str, Any]) -> None:
        """A step of several calls: recorded in ``steps``, then ``Parked``."""
        state = json.loads(json.dumps(state))
        calls = [(tool, json.loads(json.dumps(args))) for tool, args in calls]
        self.steps.append(calls)
        self.calls.append(("request_tools", calls))
        self.state = state
        raise Parked()

    def step_outcomes(self, *each: dict[str, Any]) -> list[ToolOutcome]:
        """The outcomes ``resume_all`` gets for the last step: one per call,
        each from ``outcome``'s keywords (``{}``: approved, ok, no output)."""
        calls = self.steps[-1]
        if len(each) != len(calls):
            raise ValueError(f"the step has {len(calls)} calls, not {len(each)}")
        return [
            ToolOutcome(
                tool_call_id=f"tc_{len(self.steps)}_{i}",
                tool=tool,
                args=args,
                approved=kw.get("approved", True),
                ok=kw.get("ok", True) if kw.get("approved", True) else False,
                output=kw.get("output", "")
                if kw.get("approved", True)
                else kw.get("output", "denied"),
            )
            for i, ((tool, args), kw) in enumerate(zip(calls, each, strict=True))
        ]

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.calls.append(("sleep", seconds))

    def history(self) -> list[dict[str, str]]:
        return list(self._history)

    def outcome(self, *, approved: bool = True, ok: bool = True, output: str = "") -> ToolOutcome:
        """The ToolOutcome the runtime would hand to resume for the last request."""
        tool, args, _ = self.tool_requests[-1]
        return ToolOutcome(
            tool_call_id=f"tc_{len(self.tool_requests)}",
            tool=tool,
            args=args,
            approved=approved,
            ok=ok if approved else False,
            output=output if approved else "denied",
        )


@dataclass
class AgentServer:
    """A live server (``agent_server``)."""

    host: str
    port: int

    @property
    def http(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://{self.host}:{self.port}"


class AgentClient:
    """A signed-in user's HTTP client of a live server (``agent_client``)."""

    def __init__(self, server: AgentServer, user, cookies: dict[str, str]) -> None:
        self.server = server
        self.user = user
        self.cookies = cookies

    def headers(self) -> dict[str, str]:
        """Cookie, CSRF header and Origin, as the site's own page sends them."""
        from django.conf import settings

        return {
            "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items()),
            "X-CSRFToken": self.cookies.get(settings.CSRF_COOKIE_NAME, ""),
            "Origin": self.server.http,
            "Referer": self.server.http + "/",
        }

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """``(status, the JSON body or the text)``; errors are answers, not raised."""
        data = None if body is None else json.dumps(body).encode()
        headers = {**self.headers(), "Content-Type": "application/json"}
        # The server's own http:// URL: no other scheme is opened.
        sent = urllib.request.Request(self.server.http + path, data, headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(sent, timeout=30) as answer:  # noqa: S310
                status, text = answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            status, text = refused.code, refused.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        return self.request("POST", path, {} if body is None else body)


def _application():
    # A module-level function: the server's process builds it (pickled by name).
    from channels.routing import get_default_application

    return get_default_application()


def _use_database(name: str) -> None:
    """In the server's process: the test database the tests use (a forked
    process has it already; a spawned one reads the settings afresh)."""
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = name


if pytest is not None:

    @pytest.fixture
    def agent_server(transactional_db, settings):
        """The site under daphne (see the module's comment)."""
        from daphne.testing import DaphneProcess
        from django.core.exceptions import ImproperlyConfigured
        from django.db import connections

        for connection in connections.all():
            if connection.vendor == "sqlite" and connection.is_in_memory_db():
                raise ImproperlyConfigured(
                    "agent_server shares the test database with its process: give "
                    "DATABASES['default']['TEST']['NAME'] a file, or use a server"
                )
        host = "127.0.0.1"
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, host]
        # The test database's name as the tests use it (pytest-django set it).
        database = connections["default"].settings_dict["NAME"]
        # Built here first: the server is a fork of this process, and a
        # module another thread of it is importing at the fork stays locked
        # in the fork for ever (its first import of that module hangs). Built
        # here, every module the server imports to start is imported whole.
        _application()
        server = DaphneProcess(host, partial(_application), setup=partial(_use_database, database))
        server.start()
        try:
            if not server.ready.wait(timeout=30):
                why = "" if server.errors.empty() else f": {server.errors.get_nowait()!r}"
                raise RuntimeError(f"agent_server did not start within 30 s{why}")
            yield AgentServer(host, server.port.value)
        finally:
            server.terminate()
            server.join(10)
            if server.is_alive():
                server.kill()
                server.join(5)

    @pytest.fixture
    def agent_user(django_user_model):
        """A user of the test database (password ``agent-pass-1``)."""
        password = "agent-pass-1"  # noqa: S105 (a test user's)
        return django_user_model.objects.create_user("agent-tester", password=password)

    @pytest.fixture
    def agent_client(agent_server, agent_user) -> AgentClient:
        """``agent_user`` signed in on ``agent_server`` (see the module's comment)."""
        from django.conf import settings
        from django.test import Client
        from django.utils.crypto import get_random_string

        client = Client()
        client.force_login(agent_user)
        return AgentClient(
            agent_server,
            agent_user,
            {
                settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value,
                # A CSRF secret of its own, sent back as the header (Django's rule).
                settings.CSRF_COOKIE_NAME: get_random_string(32),
            },
        )
