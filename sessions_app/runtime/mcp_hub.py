"""This process's connections to its MCP servers (``runtime.mcp``), and how
a server's question during a call reaches the user (``runtime.questions``).

One ``Hub`` a process: a thread with its own event loop (the runtime's
tools run in plain threads), one connection per server and scope (a
``shared`` server has one; a ``user`` or ``session`` one has one per user or
session, ``Caller.key``), opened on first use and again after it drops, one
lock per connection; a scoped connection idle for ``IDLE_SECONDS`` is
closed. A call's time limit (``AGENT_MCP_CALL_SECONDS``) is paused while a
question it asked waits for a person.

A question (an elicitation) belongs to the call that asked it, and only to
that call: it is that call's when it arrives inside the call's own task
(the 2026-07-28 protocol's input requests, which the call's request
carries), or when its ``_meta`` names the call (``CALL_META``, which every
call sends with the caller's identity). Anything else is declined, never
guessed from the calls in flight: on a connection that other users' calls
share, a guess could put one user's question to another. A call that timed
out or was cancelled stays known, as ended, until its connection drops, so
that a late question naming it is declined as late.

See ``runtime.mcp`` for the setting and docs/integrations.md ("MCP servers
as tools") for what is and is not supported.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connections

from sessions_app.runtime import questions
from sessions_app.wire import forms
from sessions_app.wire import protocol as p

log = logging.getLogger("sessions_app.runtime.mcp")

CONNECT_SECONDS = 20.0
CONNECT_BACKOFF = 5.0
MAX_OUTPUT_CHARS = 64 * 1024
# A user's or a session's own connection is closed after this long unused.
IDLE_SECONDS = 300.0
# Ended calls a connection remembers (a late question for one is declined).
MAX_ENDED = 1024
# The ``_meta`` key of a call: who calls, and the call's own id, which a
# server that asks during the call may send back in its question's ``_meta``.
CALL_META = "io.github.agent-sessions/caller"


@dataclass(frozen=True)
class Caller:
    """Who a call is made for: sent in its ``_meta``, and the connection it
    goes on for a scoped server."""

    user_id: int | None = None
    username: str = ""
    session_id: str = ""
    run_id: str = ""

    def key(self, name: str, scope: str) -> str:
        """The connection a call of this caller's uses on server ``name``."""
        if scope == "user":
            return f"{name}|u{self.user_id}"
        if scope == "session":
            return f"{name}|s{self.session_id}"
        return name

    def meta(self, call_id: str) -> dict[str, Any]:
        return {
            CALL_META: {
                "call": call_id,
                "user": self.username,
                "user_id": self.user_id,
                "session": self.session_id,
                "run": self.run_id,
            }
        }


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
        # Keyed by connection (``Caller.key``: the server's name, for a shared one).
        self.conns: dict[str, tuple[Any, asyncio.Event]] = {}
        self.locks: dict[str, threading.Lock] = {}
        self.failed: dict[str, tuple[float, str]] = {}
        self.used: dict[str, float] = {}
        self.busy: dict[str, int] = {}  # calls in flight per connection (any thread)
        self.guard = threading.Lock()
        # Each connection's calls by id (on the loop's thread only), in flight
        # or ended: a question that names one is that call's (see the module).
        self.calls: dict[str, dict[str, _Call]] = {}

    def run(self, coroutine, timeout: float | None):
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            if future.done():  # the coroutine's own TimeoutError
                raise
            future.cancel()
            raise McpUnavailable(f"no answer within {timeout:g} s") from None

    def client(self, key: str, name: str, caller: Caller | None = None):
        """The client of connection ``key`` to server ``name``, connected now
        if it is not (or dropped)."""
        self._close_idle(key)
        with self.guard:
            lock = self.locks.setdefault(key, threading.Lock())
            self.used[key] = time.monotonic()
        with lock:
            held = self.conns.get(key)
            if held is not None:
                return held[0]
            at, reason = self.failed.get(key, (-CONNECT_BACKOFF, ""))
            if time.monotonic() - at < CONNECT_BACKOFF:
                raise McpUnavailable(reason)
            try:
                return self.run(self._connect(key, name, caller), CONNECT_SECONDS + 5)
            except McpUnavailable as exc:
                self.failed[key] = (time.monotonic(), str(exc))
                raise

    def _close_idle(self, using: str) -> None:
        """Close the scoped connections nobody used for ``IDLE_SECONDS``."""
        now = time.monotonic()
        with self.guard:
            idle = [
                key
                for key, at in self.used.items()
                if "|" in key
                and key != using
                and now - at > IDLE_SECONDS
                and not self.busy.get(key)  # a call (a question) may wait for long
            ]
            for key in idle:
                del self.used[key]
                self.locks.pop(key, None)
        for key in idle:
            held = self.conns.get(key)
            if held is not None:
                self.forget(key, held[0])

    async def _connect(self, key: str, name: str, caller: Caller | None):
        """Open the connection (``_hold``), or give up on it after
        ``CONNECT_SECONDS``: its task is cancelled, a stdio server stopped."""
        ready: asyncio.Future = self.loop.create_future()
        holding = self.loop.create_task(self._hold(key, name, caller, ready))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), CONNECT_SECONDS)
        except BaseException as exc:
            holding.cancel()
            if isinstance(exc, TimeoutError):
                raise McpUnavailable(f"no connection within {CONNECT_SECONDS:g} s") from None
            raise

    async def _hold(
        self, key: str, name: str, caller: Caller | None, ready: asyncio.Future
    ) -> None:
        """Open the connection and keep it until stopped or dropped (in one
        task: what is entered here is left here). The calls it knew end with
        it (a question can no longer name them)."""
        from mcp import Client

        mine = None
        try:
            async with AsyncExitStack() as stack:
                target = await _target(name, caller, stack)
                mine = await stack.enter_async_context(
                    Client(target, elicitation_callback=functools.partial(self._elicit, key))
                )
                stop = asyncio.Event()
                self.conns[key] = (mine, stop)
                self.calls[key] = {}
                if not ready.done():
                    ready.set_result(mine)
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 (a dropped server, whatever it raised)
            if not ready.done():
                ready.set_exception(McpUnavailable(_reason(exc)))
            elif mine is not None:
                log.warning("MCP server %s dropped: %s", key, _reason(exc))
        finally:
            held = self.conns.get(key)
            if held is not None and held[0] is mine:
                del self.conns[key]
                self.calls.pop(key, None)

    def forget(self, key: str, client) -> None:
        """Stop that connection, if it is still the one of ``key`` (the next
        use opens another)."""

        def stop() -> None:
            held = self.conns.get(key)
            if held is not None and held[0] is client:
                del self.conns[key]
                self.calls.pop(key, None)
                held[1].set()

        self.loop.call_soon_threadsafe(stop)

    def ask(self, key: str, name: str, request, timeout: float | None, caller=None):
        """``request(client)`` on connection ``key``. A connection that broke
        is dropped (and opened again next time); a server that answered with
        an error, or is only slow, keeps it: other runs' calls may be using
        it."""
        client = self.client(key, name, caller)
        try:
            return self.run(request(client), timeout)
        except McpUnavailable:
            raise
        except Exception as exc:
            if _broken(exc):
                self.forget(key, client)
            raise McpUnavailable(_reason(exc)) from exc

    def list_tools(self, name: str) -> list[Any]:
        """The server's tools, listed on its shared connection (a scoped
        server's lists the same tools for every caller)."""
        return list(self.ask(name, name, lambda c: c.list_tools(), CONNECT_SECONDS).tools)

    def call(
        self,
        name: str,
        tool: str,
        args: dict[str, Any],
        asker: questions.Asker | None = None,
        caller: Caller | None = None,
        scope: str = "shared",
    ) -> tuple[bool, str]:
        """One call for ``caller`` (its ``_meta``; its own connection for a
        scoped server); ``asker``: how the user is asked what the server asks
        meanwhile (its wait paused the call's time limit)."""
        seconds = settings.AGENT_MCP_CALL_SECONDS
        caller = caller or Caller()
        key = caller.key(name, scope)

        def request(client):
            return self._call(key, client, tool, args, _Call(asker, caller), seconds)

        with self.guard:
            self.busy[key] = self.busy.get(key, 0) + 1
        try:
            result = self.ask(key, name, request, None, caller)
        finally:
            with self.guard:
                self.busy[key] -= 1
                if not self.busy[key]:
                    del self.busy[key]
                self.used[key] = time.monotonic()
        return not result.is_error, _text(result)

    async def _call(self, key, client, tool, args, call: _Call, seconds: float):
        token = _calling.set(call)
        known = self.calls.setdefault(key, {})
        known[call.id] = call
        try:
            async with asyncio.timeout(seconds) as call.limit:
                return await client.call_tool(tool, args, meta=call.caller.meta(call.id))
        except TimeoutError:
            raise McpUnavailable(f"no answer within {seconds:g} s") from None
        finally:
            _calling.reset(token)
            call.ended = True
            _forget_oldest_ended(known)

    def _named_call(self, key: str, context, params) -> _Call | None:
        """The call a question asked outside its call's task names in its
        ``_meta`` (``CALL_META``), if this connection knows it."""
        for meta in (getattr(params, "meta", None), getattr(context, "meta", None)):
            named = _call_id(meta)
            if named is not None:
                return self.calls.get(key, {}).get(named)
        return None

    async def _elicit(self, key: str, context, params):
        """A server asks the user (see the module's comment)."""
        from mcp.types import ElicitRequestFormParams, ElicitResult

        call = _calling.get(None) or self._named_call(key, context, params)
        why = None
        if call is None or call.asker is None:
            why = "it cannot be told which call asks"
        elif call.ended:
            why = "the call that asked has ended"
        elif not isinstance(params, ElicitRequestFormParams):
            why = "URL elicitations are not supported"
        else:
            why = forms.schema_problem(params.requested_schema)
        if why is not None:
            log.warning("MCP server %s asked the user; declined: %s", key, why)
            return ElicitResult(action="decline")
        call.pause()  # a person's time is not the server's
        try:
            decision, answer = await _asked(call.asker, params.message, params.requested_schema)
        finally:
            call.resume()
        action = ACTIONS.get(decision, "cancel")
        return ElicitResult(action=action, content=answer if action == "accept" else None)


class _Call:
    """One call: its id, who asks for it, whether it has ended (answered,
    timed out or cancelled), and its time limit, paused while any of its
    questions waits (one round may ask several at once)."""

    def __init__(self, asker: questions.Asker | None, caller: Caller) -> None:
        self.id = secrets.token_hex(8)
        self.asker = asker
        self.caller = caller
        self.ended = False
        self.limit: asyncio.Timeout | None = None
        self.asking = 0
        self.left: float | None = None

    def pause(self) -> None:
        self.asking += 1
        if self.asking == 1 and self.limit is not None and self.limit.when() is not None:
            self.left = self.limit.when() - asyncio.get_running_loop().time()
            self._reschedule(None)

    def resume(self) -> None:
        self.asking -= 1
        if self.asking == 0 and self.left is not None:
            self._reschedule(asyncio.get_running_loop().time() + max(self.left, 0))
            self.left = None

    def _reschedule(self, when: float | None) -> None:
        with suppress(RuntimeError):  # the call's limit has already ended
            self.limit.reschedule(when)  # type: ignore[union-attr]


_calling: ContextVar[_Call | None] = ContextVar("mcp_call", default=None)


def _call_id(meta: Any) -> str | None:
    """The call id a question's ``_meta`` names (``CALL_META``), or None."""
    if meta is not None and not isinstance(meta, dict):
        meta = getattr(meta, "model_extra", None) or {}
    named = (meta or {}).get(CALL_META)
    if isinstance(named, dict) and isinstance(named.get("call"), str):
        return named["call"]
    return None


def _forget_oldest_ended(known: dict[str, _Call]) -> None:
    """Keep at most ``MAX_ENDED`` ended calls (the oldest go first)."""
    ended = [call_id for call_id, call in known.items() if call.ended]
    for call_id in ended[: max(len(ended) - MAX_ENDED, 0)]:
        del known[call_id]


# What the server is told of each decision (anything else: "cancel").
ACTIONS = {p.APPROVE: "accept", p.ANSWER: "accept", p.DENY: "decline"}


async def _asked(
    asker: questions.Asker, message: str, schema: dict[str, Any]
) -> tuple[str, dict[str, Any] | None]:
    """``asker.ask`` on a thread of its own (a question may wait for minutes:
    not on a pool that others share). A call that ends while it waits (its
    server gone) stops it; the tool thread closes the question before it
    logs the call's result (``questions.asking``)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(outcome: tuple | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(outcome)

    def work() -> None:
        try:
            outcome = asker.ask(message, schema)
        except BaseException as exc:  # noqa: BLE001 (handed to the waiting call)
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, outcome, None)
        finally:
            connections.close_all()

    threading.Thread(target=work, name="mcp-question", daemon=True).start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        asker.stop()
        raise


def _broken(exc: BaseException) -> bool:
    """Did the connection break (rather than the server answer an error)?"""
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return not isinstance(exc, ValueError | TypeError)  # a result that did not validate


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _target(name: str, caller: Caller | None, stack: AsyncExitStack):
    """What ``mcp.Client`` connects to: the stdio command, or the URL (with
    an HTTP client of its own when the entry sends ``headers``). A scoped
    stdio server is told whose it is (``AGENT_MCP_USER``, and for a
    ``session`` one ``AGENT_MCP_SESSION``, started in the session's
    workspace)."""
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
    env, cwd = dict(entry.get("env") or {}), None
    scope = entry.get("scope", "shared")
    if scope != "shared" and caller is not None:
        env["AGENT_MCP_USER"] = caller.username
        if scope == "session":
            from sessions_app.runtime.tools import workspace_for

            env["AGENT_MCP_SESSION"] = caller.session_id
            cwd = workspace_for(caller.session_id)
            cwd.mkdir(parents=True, exist_ok=True)
    return StdioServerParameters(command=command[0], args=command[1:], env=env or None, cwd=cwd)


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
