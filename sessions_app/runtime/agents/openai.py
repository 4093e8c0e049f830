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
- Text the model streams before asking for a tool is shown as deltas, and
  the runtime states it whole at the gate (its own ``assistant.message``);
  the run's last ``assistant.message`` is the model's final answer.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from sessions_app.runtime import registry
from sessions_app.runtime.agents import streaming
from sessions_app.runtime.agents.toolloop import MAX_MODEL_CALLS, ToolLoopAgent
from sessions_app.runtime.base import AgentError, RunContext
from sessions_app.server import tracing

__all__ = ["MAX_MODEL_CALLS", "OpenAIAgent", "tool_schemas"]

# Seconds to wait for the endpoint: to connect and between streamed bytes.
REQUEST_TIMEOUT = 60.0


def tool_schemas() -> list[dict[str, Any]]:
    """The registry's tools in this API's shape (``AGENT_TOOLS``)."""
    return [{"type": "function", "function": tool.schema()} for tool in registry.tools().values()]


class OpenAIAgent(ToolLoopAgent):
    """Chat completions with streaming and approval-gated tool calls (the
    loop and its checkpoints: ``agents.toolloop``)."""

    def first_messages(self, ctx: RunContext) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": settings.AGENT_SYSTEM_PROMPT}
        ]
        for item in ctx.history():
            role, content = item.get("role"), item.get("content")
            if role in ("user", "assistant") and isinstance(content, str):
                messages.append({"role": role, "content": content})
        messages.append({"role": "user", "content": ctx.text})
        return messages

    def model_turn(self, text: str, calls: list[dict[str, str]]) -> dict[str, Any]:
        return {
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

    def answer(self, call: dict[str, str], content: str, ok: bool) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call["id"], "content": content}

    def add_answers(self, messages: list[dict[str, Any]], answers: list[dict[str, Any]]) -> None:
        messages.extend(answers)  # one tool message a call

    def parse_call(self, call: dict[str, str]) -> tuple[dict[str, Any] | None, str | None]:
        return _parse_call(call)

    # --- one streamed completion ----------------------------------------------

    def complete(
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
