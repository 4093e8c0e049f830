"""MCP servers as tools: ``AGENT_MCP_SERVERS`` (docs/integrations.md, "MCP").

Each entry names a server, by a stdio ``command`` (a list: the program and
its arguments; ``env`` adds variables) or a streamable HTTP ``url``
(``headers`` sent with it), and may list tools to run without asking
(``auto_approve``)::

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
(``Hub``), opened on first use and again after it drops: a server that
cannot be reached is a tool error at call time (the run goes on), never a
crash; a server that dies during a call gives that call a tool error. A
malformed entry, or a stdio server whose program is not there, is error
``E003`` of ``sessions_app`` (``manage.py check``, and every start); the
tools are listed on a thread when a process that runs agents starts, and a
server that cannot be listed then is logged and asked again later.

Elicitation (a server asking the user something during a call) is declined
(docs/integrations.md says what is and is not supported); sampling and
roots are not offered.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import shutil
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

from sessions_app.runtime.registry import Tool

log = logging.getLogger("sessions_app.runtime.mcp")

SEPARATOR = "__"
MAX_NAME = 64  # a tool's name column, and what the model APIs accept
CONNECT_SECONDS = 20.0
CONNECT_BACKOFF = 5.0
MAX_OUTPUT_CHARS = 64 * 1024


class McpUnavailable(Exception):
    """A server that cannot be reached, or that failed during a call."""


class Hub:
    """This process's connections to the MCP servers, on one event loop in a
    thread of its own (the runtime's tools run in plain threads).

    A connection is (its client, the event that stops it), set by the task
    that holds it (``_hold``) and removed by that task when it ends, whoever
    stops it: ``forget`` names the client it means, so a late ``forget``
    never stops a newer connection. One lock per server: a server slow to
    connect holds up only its own calls, and after a failed connect the next
    ``CONNECT_BACKOFF`` seconds fail at once with the same reason."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-hub", daemon=True)
        self.thread.start()
        self.conns: dict[str, tuple[Any, asyncio.Event]] = {}
        self.locks: dict[str, threading.Lock] = {}
        self.failed: dict[str, tuple[float, str]] = {}
        self.guard = threading.Lock()

    def run(self, coroutine, timeout: float):
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            if future.done():  # the coroutine's own TimeoutError
                raise
            future.cancel()
            raise McpUnavailable(f"no answer within {timeout:g} s") from None

    def client(self, name: str):
        """The server's client, connected now if it is not (or dropped)."""
        with self.guard:
            lock = self.locks.setdefault(name, threading.Lock())
        with lock:
            held = self.conns.get(name)
            if held is not None:
                return held[0]
            at, reason = self.failed.get(name, (-CONNECT_BACKOFF, ""))
            if time.monotonic() - at < CONNECT_BACKOFF:
                raise McpUnavailable(reason)
            try:
                return self.run(self._connect(name), CONNECT_SECONDS + 5)
            except McpUnavailable as exc:
                self.failed[name] = (time.monotonic(), str(exc))
                raise

    async def _connect(self, name: str):
        """Open the connection (``_hold``), or give up on it after
        ``CONNECT_SECONDS``: its task is cancelled, a stdio server stopped."""
        ready: asyncio.Future = self.loop.create_future()
        holding = self.loop.create_task(self._hold(name, ready))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), CONNECT_SECONDS)
        except BaseException as exc:
            holding.cancel()
            if isinstance(exc, TimeoutError):
                raise McpUnavailable(f"no connection within {CONNECT_SECONDS:g} s") from None
            raise

    async def _hold(self, name: str, ready: asyncio.Future) -> None:
        """Open the connection and keep it until stopped or dropped (in one
        task: what is entered here is left here)."""
        from mcp import Client

        mine = None
        try:
            async with AsyncExitStack() as stack:
                target = await _target(name, stack)
                mine = await stack.enter_async_context(
                    Client(target, elicitation_callback=_decline)
                )
                stop = asyncio.Event()
                self.conns[name] = (mine, stop)
                if not ready.done():
                    ready.set_result(mine)
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 (a dropped server, whatever it raised)
            if not ready.done():
                ready.set_exception(McpUnavailable(_reason(exc)))
            elif mine is not None:
                log.warning("MCP server %s dropped: %s", name, _reason(exc))
        finally:
            held = self.conns.get(name)
            if held is not None and held[0] is mine:
                del self.conns[name]

    def forget(self, name: str, client) -> None:
        """Stop that connection, if it is still the server's (the next use
        opens another)."""

        def stop() -> None:
            held = self.conns.get(name)
            if held is not None and held[0] is client:
                del self.conns[name]
                held[1].set()

        self.loop.call_soon_threadsafe(stop)

    def ask(self, name: str, request, timeout: float):
        """``request(client)`` on the server's connection. A connection that
        broke is dropped (and opened again next time); a server that answered
        with an error, or is only slow, keeps it: other runs' calls may be
        using it."""
        client = self.client(name)
        try:
            return self.run(request(client), timeout)
        except McpUnavailable:
            raise
        except Exception as exc:
            if _broken(exc):
                self.forget(name, client)
            raise McpUnavailable(_reason(exc)) from exc

    def list_tools(self, name: str) -> list[Any]:
        return list(self.ask(name, lambda c: c.list_tools(), CONNECT_SECONDS).tools)

    def call(self, name: str, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
        result = self.ask(name, lambda c: c.call_tool(tool, args), settings.AGENT_MCP_CALL_SECONDS)
        return not result.is_error, _text(result)


def _broken(exc: BaseException) -> bool:
    """Did the connection break (rather than the server answer an error)?"""
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return not isinstance(exc, ValueError | TypeError)  # a result that did not validate


async def _decline(context, params):
    """Elicitation is not offered to the user (docs/integrations.md): declined."""
    from mcp.types import ElicitResult

    return ElicitResult(action="decline")


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _target(name: str, stack: AsyncExitStack):
    """What ``mcp.Client`` connects to: the stdio command, or the URL (with
    an HTTP client of its own when the entry sends ``headers``)."""
    from mcp import StdioServerParameters

    entry = settings.AGENT_MCP_SERVERS[name]
    if "url" in entry:
        if not entry.get("headers"):
            return entry["url"]
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=dict(entry["headers"]), timeout=CONNECT_SECONDS)
        )
        return streamable_http_client(entry["url"], http_client=http)
    command = list(entry["command"])
    return StdioServerParameters(command=command[0], args=command[1:], env=entry.get("env"))


def _text(result) -> str:
    """A call's content as text: its text parts, or its structured content."""
    parts = [getattr(part, "text", None) for part in result.content or []]
    text = "\n".join(part for part in parts if part)
    if not text and getattr(result, "structured_content", None) is not None:
        import json

        text = json.dumps(result.structured_content)
    return text[:MAX_OUTPUT_CHARS]


@cache
def hub() -> Hub:
    return Hub()


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
        try:
            return hub().call(self.server, self.remote, args)
        except McpUnavailable as exc:
            return False, f"MCP server {self.server!r} failed: {exc}"


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
    unknown = set(entry) - {"command", "url", "env", "headers", "auto_approve"}
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
        for name, (client, _stop) in list(hub().conns.items()):
            hub().forget(name, client)
        _listed.clear()
        _failed.clear()


setting_changed.connect(_reset)
