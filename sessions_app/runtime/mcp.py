"""MCP servers as tools: ``AGENT_MCP_SERVERS`` (docs/integrations.md, "MCP").

Each entry names a server, by a stdio ``command`` (a list: the program and
its arguments; ``env`` adds variables) or a streamable HTTP ``url``
(``headers`` sent with it), and may list tools to run without asking
(``auto_approve``), and whom one connection serves (``scope``: ``shared``,
``user`` or ``session``; every call names its caller in ``_meta``)::

    AGENT_MCP_SERVERS = {
        "files": {"command": ["python", "-m", "files_server"], "auto_approve": ["read"]},
        "search": {"url": "https://search.example/mcp"},
    }

Their tools join the registry (``runtime.registry``) as ``<server>__<tool>``
with the JSON Schema the server lists, and are gated like every tool: a
person approves each call, but those of ``auto_approve``, which run at once
(their ``tool.call`` has no gate). A call's result is logged once
(``runtime.toolcalls``); an MCP tool is never ``idempotent``, so a worker
that died during a call asks before calling it again.

Each process that executes runs (a run worker; the embedded server) holds
one connection per server, on a thread of its own with its own event loop
(``runtime.mcp_hub``), opened on first use and again after it drops: a server that
cannot be reached is a tool error at call time (the run goes on), never a
crash; a server that dies during a call gives that call a tool error. A
malformed entry, or a stdio server whose program is not there, is error
``E003`` of ``sessions_app`` (``manage.py check``, and every start); the
tools are listed on a thread when a process that runs agents starts, and a
server that cannot be listed then is logged and asked again later.

Elicitation (a server asking the user something during a call) is a gate,
a question (``runtime.questions``) with the server's form: the card shows
the form, and the person's answer, checked against it on the server
(``wire.forms``), is what the server is told it accepted; approving accepts
with the form's defaults when they answer it, denying declines. A form
outside what the cards render (``forms.schema_problem``), a URL
elicitation, and one that is not tied to its call (``runtime.mcp_hub``),
are declined (docs/integrations.md, "MCP"); the time a question waits does
not count against ``AGENT_MCP_CALL_SECONDS``. Sampling and roots are not offered.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

from sessions_app.models import AgentSession
from sessions_app.runtime import questions
from sessions_app.runtime.mcp_hub import Caller, McpUnavailable, hub
from sessions_app.runtime.registry import Tool

log = logging.getLogger("sessions_app.runtime.mcp")

SEPARATOR = "__"
# Who shares a server's connection (and, over stdio, its process): every
# user, each user, or each session (docs/integrations.md, "MCP").
SCOPES = ("shared", "user", "session")
MAX_NAME = 64  # a tool's name column, and what the model APIs accept


class McpTool(Tool):
    """One tool of one MCP server (an instance per tool, not a subclass)."""

    def __init__(self, server: str, listed: Any, auto: bool) -> None:
        self.server = server
        self.remote = listed.name
        self.name = f"{server}{SEPARATOR}{listed.name}"  # type: ignore[misc]
        self.description = listed.description or ""  # type: ignore[misc]
        schema = listed.input_schema if isinstance(listed.input_schema, dict) else {}
        self.parameters = schema or {"type": "object", "properties": {}}  # type: ignore[misc]
        self.auto_approve = auto  # type: ignore[misc]

    def validate(self, args: Any) -> str | None:
        """An object with the required arguments: the server checks the rest."""
        if not isinstance(args, dict):
            return "arguments must be an object"
        for key in self.parameters.get("required", ()):
            if key not in args:
                return f"{self.name} needs the argument {key!r}"
        return None

    def execute(self, args: dict[str, Any], workspace: Path) -> tuple[bool, str]:
        asker = questions.current()
        scope = servers().get(self.server, {}).get("scope", "shared")
        try:
            return hub().call(self.server, self.remote, args, asker, caller_of(asker), scope=scope)
        except McpUnavailable as exc:
            return False, f"MCP server {self.server!r} failed: {exc}"


def caller_of(asker: questions.Asker | None) -> Caller:
    """Who a call is made for: the run's session, and its owner."""
    if asker is None:
        return Caller()
    session_id, run_id = asker.ctx.session_id, asker.ctx.run_id
    owner = (
        AgentSession.objects.filter(id=session_id)
        .values_list("owner_id", "owner__username")
        .first()
    ) or (None, "")
    return Caller(owner[0], owner[1], session_id, run_id)


def servers() -> dict[str, dict[str, Any]]:
    return dict(getattr(settings, "AGENT_MCP_SERVERS", {}) or {})


def problem_with(name: str, entry: Any) -> str | None:
    """What is wrong with an entry of the setting, or None."""
    if not isinstance(entry, dict):
        return "must be a dict"
    if ("command" in entry) == ("url" in entry):
        return "needs exactly one of 'command' (a list) or 'url'"
    if "command" in entry and not (
        isinstance(entry["command"], list | tuple)
        and entry["command"]
        and all(isinstance(part, str) for part in entry["command"])
    ):
        return "'command' must be a non-empty list of strings"
    if "url" in entry and not str(entry["url"]).startswith(("http://", "https://")):
        return "'url' must be an http(s) URL"
    for key in ("env", "headers"):
        value = entry.get(key, {})
        if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
            return f"{key!r} must map names to strings"
    auto = entry.get("auto_approve", [])
    if not (isinstance(auto, list | tuple) and all(isinstance(t, str) for t in auto)):
        return "'auto_approve' must be a list of tool names"
    if entry.get("scope", "shared") not in SCOPES:
        return f"'scope' must be one of {', '.join(SCOPES)}"
    unknown = set(entry) - {"command", "url", "env", "headers", "auto_approve", "scope"}
    if unknown:
        return f"unknown keys: {', '.join(sorted(unknown))}"
    if SEPARATOR in name or not name.replace("_", "a").replace("-", "a").isalnum():
        return f"a server's name is letters, digits, '-' and single '_' (not {SEPARATOR!r})"
    return None


def cannot_start(entry: dict[str, Any]) -> str | None:
    """Why a stdio entry's program cannot be started (not found, or not a
    program), or None; the ``mcp`` package missing, for any entry."""
    if importlib.util.find_spec("mcp") is None:
        return "the mcp package is not installed: pip install 'agent-sessions[mcp]'"
    if "command" not in entry:
        return None
    program = entry["command"][0]
    found = shutil.which(program)
    if found is None:
        return f"its program {program!r} is not found (or not executable)"
    return None


def load(name: str) -> list[McpTool]:
    """The server's tools, listed now (``McpUnavailable`` if it cannot be)."""
    if importlib.util.find_spec("mcp") is None:
        raise McpUnavailable("the mcp package is not installed: pip install 'agent-sessions[mcp]'")
    entry = servers()[name]
    auto = set(entry.get("auto_approve", ()))
    found = [McpTool(name, listed, listed.name in auto) for listed in hub().list_tools(name)]
    for tool in found:
        if len(tool.name) > MAX_NAME:
            raise McpUnavailable(f"the tool name {tool.name!r} is over {MAX_NAME} characters")
    return found


_listed: dict[str, list[McpTool]] = {}
_failed: dict[str, float] = {}
# A server whose tools could not be listed is asked again after this long.
RETRY_SECONDS = 30.0


def tools() -> list[McpTool]:
    """Every MCP tool this process has listed (never connects: a registry
    lookup may run inside a transaction; ``refresh`` lists)."""
    out: list[McpTool] = []
    for name in servers():
        out += _listed.get(name, [])
    return out


def refresh() -> None:
    """List the tools of each server not listed yet (one that could not be
    is asked again ``RETRY_SECONDS`` later, and its tools are missing
    meanwhile: a call of one is refused as an unknown tool). Called at a
    worker's start, and when a run asks for a tool the registry lacks."""
    for name in servers():
        if name in _listed:
            continue
        if time.monotonic() - _failed.get(name, -RETRY_SECONDS) < RETRY_SECONDS:
            continue
        try:
            _listed[name] = load(name)
        except McpUnavailable as exc:
            _failed[name] = time.monotonic()
            log.error("MCP server %s: cannot list its tools: %s", name, exc)


def refresh_in_background() -> None:
    """``refresh`` on a thread: a process's start does not wait for its servers."""
    if servers():
        threading.Thread(target=refresh, name="mcp-list", daemon=True).start()


def _reset(setting: str, **_: Any) -> None:
    if setting in ("AGENT_MCP_SERVERS", "AGENT_TOOLS"):
        for key, (client, _stop) in list(hub().conns.items()):
            hub().forget(key, client)
        _listed.clear()
        _failed.clear()


setting_changed.connect(_reset)
