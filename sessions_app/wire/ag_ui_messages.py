"""AG-UI messages of a session's turns (``wire.ag_ui``): the snapshots a
late joiner, an answer to a gate and a take-back are given, with the ids a
live response gives the same things. Pure."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import AssistantMessage, FunctionCall, ToolCall, ToolMessage, UserMessage

from sessions_app.wire import protocol as p

__all__ = ["history", "text_id"]


def text_id(run_id: str, segment: int) -> str:
    """A text message's id: the run's ``segment``-th (from 0), the same in
    every response and in a snapshot."""
    return f"{run_id}:t{segment}"


def history(turns: list[tuple[str, str, str, list[tuple[str, dict, int]]]]) -> list[Any]:
    """AG-UI messages of turns: each (user message id, its text, run id, the
    run's events as (kind, data, seq) but their deltas). Their ids are those
    a live response gives: a text message ``text_id``, a tool call's
    message the call's id (``TOOL_CALL_START`` without a parent makes it),
    a result ``<run id>:<seq>``."""
    out: list[Any] = []
    for message_id, text, run_id, events in turns:
        out.append(UserMessage(id=message_id, role="user", content=text))
        segment = 0
        for kind, data, seq in events:
            if kind == p.K_ASSISTANT_MESSAGE and data.get("text"):
                message_id = text_id(run_id, segment)
                out.append(AssistantMessage(id=message_id, role="assistant", content=data["text"]))
                segment += 1
            elif kind == p.K_TOOL_CALL:
                call = ToolCall(
                    id=data["tool_call_id"],
                    type="function",
                    function=FunctionCall(
                        name=data["tool"], arguments=json.dumps(data.get("args") or {})
                    ),
                )
                out.append(
                    AssistantMessage(id=data["tool_call_id"], role="assistant", tool_calls=[call])
                )
            elif kind == p.K_TOOL_RESULT:
                output = data.get("output")
                content = output if isinstance(output, str) else json.dumps(output)
                out.append(
                    ToolMessage(
                        id=f"{run_id}:{seq}",
                        role="tool",
                        content=content,
                        tool_call_id=data["tool_call_id"],
                    )
                )
    return out
