"""An agent backed by Anthropic's Messages API (``AGENT_CLASS = "anthropic"``).

The second worked example of docs/agents.md, beside the OpenAI-compatible
one: the same tools, gates and saved state, another wire format. It streams
the model's text as deltas (``content_block_delta`` / ``text_delta``), and
each ``tool_use`` block the model makes parks the run at an approval gate.
After the gate the tool's output goes back as a ``tool_result`` block; the
results of one turn's calls go back together in one user message, as the API
requires. Everything needed to go on after a gate is in ``ctx.state``, so
``resume`` may run in another process. Only the standard library is used.

Settings: ANTHROPIC_API_KEY, ANTHROPIC_MODEL, ANTHROPIC_BASE_URL (for a
proxy or a local fake), ANTHROPIC_MAX_TOKENS.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from sessions_app.runtime import registry
from sessions_app.runtime.agents import streaming
from sessions_app.runtime.agents.toolloop import MAX_MODEL_CALLS, ToolLoopAgent
from sessions_app.runtime.base import AgentError, RunContext
from sessions_app.server import tracing
from sessions_app.wire import strict_json

API_VERSION = "2023-06-01"
__all__ = ["MAX_MODEL_CALLS", "AnthropicAgent", "tool_schemas"]
# Seconds to wait for the endpoint: to connect and between streamed bytes.
REQUEST_TIMEOUT = 60.0


def tool_schemas() -> list[dict[str, Any]]:
    """The registry's tools in this API's shape (``AGENT_TOOLS``)."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in registry.tools().values()
    ]


class AnthropicAgent(ToolLoopAgent):
    """The Messages API with streaming and approval-gated tool use (the loop
    and its checkpoints: ``agents.toolloop``)."""

    def first_messages(self, ctx: RunContext) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        for item in ctx.history():
            role, content = item.get("role"), item.get("content")
            usable = role in ("user", "assistant") and isinstance(content, str)
            # The conversation starts with the user (the history window may
            # begin with an answer; some gateways refuse that).
            if usable and content.strip() and (messages or role == "user"):
                _add(messages, role, content)
        _add(messages, "user", ctx.text)
        return messages

    def model_turn(self, text: str, calls: list[dict[str, str]]) -> dict[str, Any]:
        # A text block must hold more than whitespace (the API refuses it).
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
        content += [
            {"type": "tool_use", "id": c["id"], "name": c["name"], "input": _input(c)}
            for c in calls
        ]
        return {"role": "assistant", "content": content}

    def answer(self, call: dict[str, str], content: str, ok: bool) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": content,
            "is_error": not ok,
        }

    def add_answers(self, messages: list[dict[str, Any]], answers: list[dict[str, Any]]) -> None:
        # One turn's results go back together, in one user message.
        messages.append({"role": "user", "content": answers})

    def parse_call(self, call: dict[str, str]) -> tuple[dict[str, Any] | None, str | None]:
        return _parse_call(call)

    def complete(
        self, ctx: RunContext, messages: list[dict[str, Any]]
    ) -> tuple[str, list[dict[str, str]]]:
        """Stream one response: deltas go to ``ctx``; returns (text, tool uses)."""
        blocks: dict[int, dict[str, str]] = {}
        stop: list[str] = []
        call = {"backend": "anthropic", "model": settings.ANTHROPIC_MODEL, "run.id": ctx.run_id}
        with tracing.span("model.call", **call):
            text = streaming.stream(
                ctx,
                _open(messages),
                lambda payload: _apply_event(payload, blocks, stop),
                secret=settings.ANTHROPIC_API_KEY,
                timeout=REQUEST_TIMEOUT,
            )
        if stop and stop[-1] == "max_tokens":
            # Cut off: the text is unfinished and a tool input may be half
            # written; say so rather than finish as if the answer were whole.
            raise AgentError(
                "the model's answer was cut off at ANTHROPIC_MAX_TOKENS "
                f"({int(settings.ANTHROPIC_MAX_TOKENS)} tokens)"
            )
        calls = [blocks[index] for index in sorted(blocks)]
        for position, call in enumerate(calls):
            call["id"] = call["id"] or f"toolu_{position}"
        return text, calls


def _add(messages: list[dict[str, Any]], role: str, text: str) -> None:
    """Append a text turn; two in a row of one role become one (the API alternates)."""
    if messages and messages[-1]["role"] == role and isinstance(messages[-1]["content"], str):
        messages[-1]["content"] += "\n\n" + text
    else:
        messages.append({"role": role, "content": text})


def _input(call: dict[str, str]) -> dict[str, Any]:
    try:
        value = strict_json.loads(call.get("arguments") or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _parse_call(call: dict[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """The call's input, or the error to answer the model with."""
    return streaming.parse_tool_call(call, "the input is")


def _apply_event(payload: str, blocks: dict[int, dict[str, str]], stop: list[str]) -> str:
    """Fold one streamed event into ``blocks`` (the tool uses) and ``stop`` (the
    stop reason); returns its text."""
    event = streaming.parse_json(payload)
    kind = event.get("type")
    if kind == "message_delta":
        reason = (event.get("delta") or {}).get("stop_reason")
        if isinstance(reason, str):
            stop.append(reason)
        return ""
    if kind == "error":
        message = streaming.error_message(event, settings.ANTHROPIC_API_KEY)
        raise AgentError(f"the model endpoint reported an error: {message}")
    index = event.get("index")
    index = index if isinstance(index, int) else 0
    if kind == "content_block_start":
        block = event.get("content_block")
        if not isinstance(block, dict):
            return ""
        if block.get("type") == "tool_use":
            blocks[index] = {
                "id": str(block.get("id") or ""),
                "name": str(block.get("name") or ""),
                # The input arrives as JSON fragments; a block may carry a whole one.
                "arguments": json.dumps(block["input"]) if block.get("input") else "",
            }
        text = block.get("text") if block.get("type") == "text" else None
        return text if isinstance(text, str) else ""
    if kind == "content_block_delta":
        delta = event.get("delta")
        if not isinstance(delta, dict):
            return ""
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            return delta["text"]
        if delta.get("type") == "input_json_delta" and index in blocks:
            partial = delta.get("partial_json")
            if isinstance(partial, str):
                blocks[index]["arguments"] += partial
    return ""  # message_start/_delta/_stop, content_block_stop, ping


def _open(messages: list[dict[str, Any]]) -> Any:
    base = str(settings.ANTHROPIC_BASE_URL).rstrip("/")
    body = {
        "model": settings.ANTHROPIC_MODEL,
        "max_tokens": int(settings.ANTHROPIC_MAX_TOKENS),
        "system": settings.AGENT_SYSTEM_PROMPT,
        "messages": messages,
        "tools": tool_schemas(),
        "stream": True,
    }
    headers = {"anthropic-version": API_VERSION}
    if settings.ANTHROPIC_API_KEY:
        headers["x-api-key"] = settings.ANTHROPIC_API_KEY
    return streaming.open_stream(
        f"{base}/messages",
        body,
        headers,
        secret=settings.ANTHROPIC_API_KEY,
        timeout=REQUEST_TIMEOUT,
    )
