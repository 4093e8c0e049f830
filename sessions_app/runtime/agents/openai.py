"""An agent backed by any OpenAI-compatible chat-completions endpoint.

It streams the model's text as deltas, offers the two workspace tools as
function tools, and parks the run at an approval gate for each tool call the
model makes. Everything needed to go on after a gate (the conversation so far
and the calls still pending) is kept in ``ctx.state``, so ``resume`` may run in
another process. Only the standard library is used.

Choices not fixed by the protocol:

- A tool call the model got wrong (unknown tool, arguments that are not JSON
  or not valid for the tool) is not shown to the user for approval: it is
  answered to the model as a failed tool message and the loop goes on.
- Text the model streams before asking for a tool is shown as deltas; the
  run's ``assistant.message`` is the text of the model's final answer.
"""

from __future__ import annotations

import copy
import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from django.conf import settings

from ..base import AgentError, RunContext, ToolOutcome
from ..tools import TOOLS, validate_args

# Model calls per run (the first plus one after each round of tools).
MAX_MODEL_CALLS = 8
# Text fragments arriving within this long of the first buffered one go out
# as one delta, so a fast model is not one event per token.
COALESCE_SECONDS = 0.03
# Seconds to wait for the endpoint: to connect and between streamed bytes.
REQUEST_TIMEOUT = 60.0
MAX_ERROR_DETAIL = 500

SYSTEM_PROMPT = (
    "You are a helpful assistant in a web chat. You have a private working "
    "directory (the workspace) and two tools. write_file appends a line of "
    "text to a file in the workspace; paths are relative to it. terminal runs "
    "one of echo, ls, cat, wc, date or pwd in the workspace, without a shell "
    "(no pipes, redirections or globbing) and only on paths inside it. The "
    "user approves or denies every tool call; a denied call answers 'denied'."
)

TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Append TEXT and a newline to a file in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Relative path inside the workspace, e.g. notes.txt",
                    },
                    "text": {"type": "string", "description": "The text to append."},
                },
                "required": ["path", "text"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": (
                "Run one command (echo, ls, cat, wc, date or pwd) in the workspace, "
                "without a shell. Returns its output."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "e.g. ls -l or cat notes.txt"},
                },
                "required": ["command"],
                "additionalProperties": False,
            },
        },
    },
]


class OpenAIAgent:
    """Chat completions with streaming and approval-gated tool calls."""

    def start(self, ctx: RunContext) -> None:
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
        for item in ctx.history():
            role, content = item.get("role"), item.get("content")
            if role in ("user", "assistant") and isinstance(content, str):
                messages.append({"role": role, "content": content})
        messages.append({"role": "user", "content": ctx.text})
        self._loop(ctx, messages, [], 0)

    def resume(self, ctx: RunContext, outcome: ToolOutcome) -> None:
        state = copy.deepcopy(ctx.state or {})  # never mutate the runtime's copy
        messages, current = state.get("messages"), state.get("current")
        if not isinstance(messages, list) or not isinstance(current, dict):
            raise AgentError("the saved state of this run is unusable")
        # The runtime has its own tool_call_id; the model needs its own back.
        content = outcome.output if outcome.approved else "denied"
        messages.append({"role": "tool", "tool_call_id": current["id"], "content": content})
        pending = list(state.get("pending") or [])
        self._loop(ctx, messages, pending, int(state.get("model_calls", 0)))

    def _loop(
        self,
        ctx: RunContext,
        messages: list[dict[str, Any]],
        pending: list[dict[str, str]],
        model_calls: int,
    ) -> None:
        while True:
            while pending:
                call = pending.pop(0)
                args, error = _parse_call(call)
                if error is not None:
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": error})
                    continue
                state = {
                    "messages": messages,
                    "pending": pending,
                    "current": call,
                    "model_calls": model_calls,
                }
                ctx.request_tool(call["name"], args, state=state)
                return  # request_tool raises Parked; never reached with a real runtime
            if model_calls >= MAX_MODEL_CALLS:
                raise AgentError(
                    f"the model was still calling tools after {MAX_MODEL_CALLS} rounds; stopped"
                )
            model_calls += 1
            text, calls = self._complete(ctx, messages)
            if not calls:
                ctx.message(text)
                return
            messages.append(
                {
                    "role": "assistant",
                    "content": text or None,
                    "tool_calls": [
                        {
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": call["arguments"]},
                        }
                        for call in calls
                    ],
                }
            )
            pending = calls

    # --- one streamed completion ----------------------------------------------

    def _complete(
        self, ctx: RunContext, messages: list[dict[str, Any]]
    ) -> tuple[str, list[dict[str, str]]]:
        """Stream one completion: deltas go to ``ctx``; returns (text, tool calls)."""
        response = _open(messages)
        # A reader thread, so a buffered fragment goes out on time even while
        # the model is silent; ctx is only ever called from this thread.
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        threading.Thread(
            target=_read_sse, args=(response, events), name="openai-sse", daemon=True
        ).start()
        text: list[str] = []
        buffer: list[str] = []
        flush_at: float | None = None
        calls: dict[int, dict[str, str]] = {}
        try:
            while True:
                timeout = None if flush_at is None else max(flush_at - time.monotonic(), 0)
                try:
                    kind, payload = events.get(timeout=timeout)
                except queue.Empty:
                    kind, payload = "flush", None
                if kind == "end":
                    break
                if kind == "error":
                    raise _stream_error(payload)
                if kind == "data":
                    fragment = _apply_chunk(payload, calls)
                    if fragment:
                        text.append(fragment)
                        if not buffer:
                            flush_at = time.monotonic() + COALESCE_SECONDS
                        buffer.append(fragment)
                if buffer and flush_at is not None and time.monotonic() >= flush_at:
                    ctx.delta("".join(buffer))
                    buffer.clear()
                    flush_at = None
        finally:
            response.close()  # also stops the reader when we leave early
        if buffer:
            ctx.delta("".join(buffer))
        ordered = [calls[index] for index in sorted(calls)]
        for position, call in enumerate(ordered):
            call["id"] = call["id"] or f"call_{position}"
        return "".join(text), ordered


def _parse_call(call: dict[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """The call's arguments, or the error to answer the model with."""
    name = call.get("name", "")
    if name not in TOOLS:
        return None, f"error: unknown tool {name!r}; the tools are {', '.join(TOOLS)}"
    try:
        args = json.loads(call.get("arguments") or "{}")
    except json.JSONDecodeError as exc:
        return None, f"error: the arguments are not valid JSON ({exc.msg})"
    problem = validate_args(name, args)
    if problem:
        return None, f"error: {problem}"
    return args, None


def _apply_chunk(payload: str, calls: dict[int, dict[str, str]]) -> str:
    """Fold one SSE chunk into ``calls``; returns its text fragment."""
    try:
        chunk = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise AgentError(f"the model endpoint sent a malformed chunk ({exc.msg})") from exc
    if not isinstance(chunk, dict):
        raise AgentError("the model endpoint sent a malformed chunk")
    if chunk.get("error"):
        raise AgentError(f"the model endpoint reported an error: {_error_message(chunk)}")
    fragment = ""
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        content = delta.get("content")
        if isinstance(content, str):
            fragment += content
        for part in delta.get("tool_calls") or []:
            if not isinstance(part, dict):
                continue
            index = part.get("index")
            index = index if isinstance(index, int) else 0
            slot = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            if isinstance(part.get("id"), str) and part["id"]:
                slot["id"] = part["id"]
            function = part.get("function")
            if not isinstance(function, dict):
                continue
            name, arguments = function.get("name"), function.get("arguments")
            # Most servers send the name once; some repeat it in every chunk.
            if isinstance(name, str) and name != slot["name"]:
                slot["name"] += name
            if isinstance(arguments, str):
                slot["arguments"] += arguments
    return fragment


def _read_sse(response: Any, events: queue.Queue) -> None:
    """Reader thread: hands each ``data:`` payload to the run's thread."""
    try:
        for raw in response:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            events.put(("data", payload))
    except Exception as exc:  # any failure, re-raised in the run's thread
        events.put(("error", exc))
    finally:
        events.put(("end", None))


def _open(messages: list[dict[str, Any]]) -> Any:
    base = str(settings.OPENAI_BASE_URL).rstrip("/")
    body = json.dumps(
        {
            "model": settings.OPENAI_MODEL,
            "messages": messages,
            "tools": TOOL_SCHEMAS,
            "stream": True,
        }
    ).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if settings.OPENAI_API_KEY:
        headers["Authorization"] = f"Bearer {settings.OPENAI_API_KEY}"
    url = f"{base}/chat/completions"
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise AgentError("OPENAI_BASE_URL must be an http or https URL")
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 -- scheme checked
    try:
        return urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT)  # noqa: S310 -- scheme checked
    except urllib.error.HTTPError as exc:
        detail = ""
        try:
            raw = exc.read(64 * 1024).decode("utf-8", errors="replace")
            detail = _error_message(json.loads(raw))
        except (OSError, ValueError):
            pass
        finally:
            exc.close()
        suffix = f": {detail}" if detail else ""
        raise AgentError(f"the model endpoint answered HTTP {exc.code}{suffix}") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise _timeout_error() from None
        raise AgentError(f"could not reach the model endpoint: {_redact(exc.reason)}") from None
    except TimeoutError:
        raise _timeout_error() from None
    except OSError as exc:
        raise AgentError(f"could not reach the model endpoint: {_redact(exc)}") from None


def _error_message(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return _redact(message)[:MAX_ERROR_DETAIL] if message else ""


def _stream_error(exc: BaseException) -> AgentError:
    if isinstance(exc, TimeoutError):
        return _timeout_error()
    return AgentError(f"the model's stream broke off: {_redact(exc) or type(exc).__name__}")


def _timeout_error() -> AgentError:
    return AgentError(f"the model endpoint did not answer within {REQUEST_TIMEOUT:g} s")


def _redact(value: Any) -> str:
    """``str(value)`` without the API key, whatever an endpoint echoes back."""
    text = str(value)
    key = settings.OPENAI_API_KEY
    return text.replace(key, "[redacted]") if key else text
