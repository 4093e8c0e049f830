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
from typing import Any

from django.conf import settings

from sessions_app.runtime import registry
from sessions_app.runtime.agents import streaming
from sessions_app.runtime.base import AgentError, RunContext, ToolOutcome
from sessions_app.server import tracing

# Model calls per run (the first plus one after each round of tools).
MAX_MODEL_CALLS = 8
# Seconds to wait for the endpoint: to connect and between streamed bytes.
REQUEST_TIMEOUT = 60.0


def tool_schemas() -> list[dict[str, Any]]:
    """The registry's tools in this API's shape (``AGENT_TOOLS``)."""
    return [{"type": "function", "function": tool.schema()} for tool in registry.tools().values()]


class OpenAIAgent:
    """Chat completions with streaming and approval-gated tool calls."""

    def start(self, ctx: RunContext) -> None:
        if ctx.state.get("done"):  # taken over after its answer: said once
            return
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": settings.AGENT_SYSTEM_PROMPT}
        ]
        for item in ctx.history():
            role, content = item.get("role"), item.get("content")
            if role in ("user", "assistant") and isinstance(content, str):
                messages.append({"role": role, "content": content})
        messages.append({"role": "user", "content": ctx.text})
        self._loop(ctx, messages, [], 0)

    def resume(self, ctx: RunContext, outcome: ToolOutcome) -> None:
        if ctx.state.get("done"):
            return
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
                ctx.state["done"] = True  # saved with the message (docs/agents.md)
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
        calls: dict[int, dict[str, str]] = {}
        call = {"backend": "openai", "model": settings.OPENAI_MODEL, "run.id": ctx.run_id}
        with tracing.span("model.call", **call):
            text = streaming.stream(
                ctx,
                _open(messages),
                lambda payload: _apply_chunk(payload, calls),
                secret=settings.OPENAI_API_KEY,
                timeout=REQUEST_TIMEOUT,
            )
        ordered = [calls[index] for index in sorted(calls)]
        for position, call in enumerate(ordered):
            call["id"] = call["id"] or f"call_{position}"
        return text, ordered


def _parse_call(call: dict[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """The call's arguments, or the error to answer the model with."""
    return streaming.parse_tool_call(call, "the arguments are")


def _apply_chunk(payload: str, calls: dict[int, dict[str, str]]) -> str:
    """Fold one SSE chunk into ``calls``; returns its text fragment."""
    chunk = streaming.parse_json(payload)
    if chunk.get("error"):
        message = streaming.error_message(chunk, settings.OPENAI_API_KEY)
        raise AgentError(f"the model endpoint reported an error: {message}")
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


def _open(messages: list[dict[str, Any]]) -> Any:
    base = str(settings.OPENAI_BASE_URL).rstrip("/")
    body = {
        "model": settings.OPENAI_MODEL,
        "messages": messages,
        "tools": tool_schemas(),
        "stream": True,
    }
    headers = {}
    if settings.OPENAI_API_KEY:
        headers["Authorization"] = f"Bearer {settings.OPENAI_API_KEY}"
    return streaming.open_stream(
        f"{base}/chat/completions",
        body,
        headers,
        secret=settings.OPENAI_API_KEY,
        timeout=REQUEST_TIMEOUT,
    )
