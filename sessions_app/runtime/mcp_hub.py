"""This process's connections to its MCP servers (``runtime.mcp``), and how
a server's question during a call reaches the user (``runtime.questions``).

One ``Hub`` a process: a thread with its own event loop (the runtime's
tools run in plain threads), one connection per server, opened on first
use and again after it drops, one lock per server. A call's time limit
(``AGENT_MCP_CALL_SECONDS``) is paused while a question it asked waits
for a person. See ``runtime.mcp`` for the setting and docs/integrations.md
("MCP servers as tools") for what is and is not supported.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack, suppress
from contextvars import ContextVar
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connections

from sessions_app.runtime import questions
from sessions_app.wire import protocol as p

log = logging.getLogger("sessions_app.runtime.mcp")

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
        # The calls in flight on each server (on the loop's thread only): an
        # elicitation that arrives outside its call's task is that call's
        # when there is one.
        self.in_flight: dict[str, set[_Call]] = {}

    def run(self, coroutine, timeout: float | None):
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
                    Client(target, elicitation_callback=functools.partial(self._elicit, name))
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

    def ask(self, name: str, request, timeout: float | None):
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

    def call(
        self, name: str, tool: str, args: dict[str, Any], asker: questions.Asker | None = None
    ) -> tuple[bool, str]:
        """One call; ``asker``: how the user is asked what the server asks
        meanwhile (its wait paused the call's time limit)."""
        seconds = settings.AGENT_MCP_CALL_SECONDS
        result = self.ask(name, lambda c: self._call(name, c, tool, args, asker, seconds), None)
        return not result.is_error, _text(result)

    async def _call(self, name, client, tool, args, asker, seconds: float):
        call = _Call(asker)
        token = _calling.set(call)
        self.in_flight.setdefault(name, set()).add(call)
        try:
            async with asyncio.timeout(seconds) as call.limit:
                return await client.call_tool(tool, args)
        except TimeoutError:
            raise McpUnavailable(f"no answer within {seconds:g} s") from None
        finally:
            self.in_flight[name].discard(call)
            _calling.reset(token)

    async def _elicit(self, name: str, context, params):
        """A server asks the user (see the module's comment)."""
        from mcp.types import ElicitRequestFormParams, ElicitResult

        call = _calling.get(None)
        if call is None:  # asked outside its call's task: the one call in flight
            waiting = self.in_flight.get(name) or set()
            call = next(iter(waiting)) if len(waiting) == 1 else None
        why = None
        if call is None or call.asker is None:
            why = "it cannot be told which call asks"
        elif not isinstance(params, ElicitRequestFormParams):
            why = "URL elicitations are not supported"
        else:
            answer = approving_answer(params.requested_schema)
            if answer is None:
                why = "the form asks for input that has no default"
        if why is not None:
            log.warning("MCP server %s asked the user; declined: %s", name, why)
            return ElicitResult(action="decline")
        call.pause()  # a person's time is not the server's
        try:
            decision = await _asked(call.asker, params.message, answer)
        finally:
            call.resume()
        action = {p.APPROVE: "accept", p.DENY: "decline"}.get(decision, "cancel")
        return ElicitResult(action=action, content=answer if action == "accept" else None)


class _Call:
    """One call in flight: who asks for it, and its time limit, paused while
    any of its questions waits (one round may ask several at once)."""

    def __init__(self, asker: questions.Asker | None) -> None:
        self.asker = asker
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


async def _asked(asker: questions.Asker, message: str, answer: dict[str, Any]) -> str:
    """``asker.ask`` on a thread of its own (a question may wait for minutes:
    not on a pool that others share). A call that ends while it waits (its
    server gone) stops it; the tool thread closes the question before it
    logs the call's result (``questions.asking``)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(outcome: str | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(outcome)

    def work() -> None:
        try:
            outcome = asker.ask(message, answer)
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


def approving_answer(schema: Any) -> dict[str, Any] | None:
    """What approving a form answers: each field's default, ``true`` for a
    required yes/no without one; None when a required field has neither."""
    if not isinstance(schema, dict):
        return None
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    answer: dict[str, Any] = {}
    for key, prop in props.items():
        if not isinstance(prop, dict):
            return None
        if "default" in prop:
            answer[key] = prop["default"]
        elif prop.get("type") == "boolean" and key in required:
            answer[key] = True
        elif key in required:
            return None
    return answer


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
