"""The AI SDK's side of a request: what its body asks (``parse_chat``, as
the ``ai`` package's ``DefaultChatTransport`` sends it), and the
``UIMessage``s a page loads (``assistant_message``: the encoder's chunks
folded as the AI SDK folds them) of the finished runs before it resumes the
one still going (``GET …/messages``). Pure, like the encoder
(``wire.ai_sdk``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sessions_app.wire import protocol as p
from sessions_app.wire.ai_sdk import UiMessageStream


def fold(chunks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts of a message from its chunks, as the AI SDK's own
    ``processUIMessageStream`` builds them (for the chunks this encoder writes)."""
    parts: list[dict[str, Any]] = []
    texts: dict[str, dict[str, Any]] = {}
    tools: dict[str, dict[str, Any]] = {}
    step_at = 0
    for chunk in chunks:
        kind = chunk["type"]
        if kind == "start-step":
            parts.append({"type": "step-start"})
            step_at = len(parts)
        elif kind == "reset-step":
            del parts[step_at:]
        elif kind == "text-start":
            texts[chunk["id"]] = {"type": "text", "text": "", "state": "streaming"}
            parts.append(texts[chunk["id"]])
        elif kind == "text-delta":
            texts[chunk["id"]]["text"] += chunk["delta"]
        elif kind == "text-end":
            texts[chunk["id"]]["state"] = "done"
        elif kind == "tool-input-available":
            tools[chunk["toolCallId"]] = {
                "type": f"tool-{chunk['toolName']}",
                "toolCallId": chunk["toolCallId"],
                "state": "input-available",
                "input": chunk["input"],
            }
            parts.append(tools[chunk["toolCallId"]])
        elif kind == "tool-approval-request" and chunk["toolCallId"] in tools:
            part = tools[chunk["toolCallId"]]
            part["state"] = "approval-requested"
            part["approval"] = {"id": chunk["approvalId"]}
        elif kind == "tool-approval-response":
            for part in tools.values():
                if part.get("approval", {}).get("id") == chunk["approvalId"]:
                    part["state"] = "approval-responded"
                    part["approval"]["approved"] = chunk["approved"]
        elif kind.startswith("tool-output-") and chunk["toolCallId"] in tools:
            part = tools[chunk["toolCallId"]]
            part["state"] = kind.removeprefix("tool-")
            if kind == "tool-output-available":
                part["output"] = chunk["output"]
            elif kind == "tool-output-error":
                part["errorText"] = chunk["errorText"]
    return parts


def assistant_message(session_id: str, run_id: str, frames: Iterable[tuple[str, int]]):
    """A finished run's ``UIMessage`` from its events' frames (seq order)."""
    encoder = UiMessageStream(session_id, run_id, stop_at_gate=False)
    encoder.opening(session_id, "", 0)
    chunks = encoder.take()
    for text, seq in frames:
        frame = json.loads(text)
        if frame.get("run_id") == run_id:
            encoder.event(frame["kind"], frame.get("data") or {}, seq)
            chunks += encoder.take()
    metadata: dict[str, Any] = {}
    for chunk in chunks:
        metadata.update(chunk.get("messageMetadata") or {})
    return {"id": run_id, "role": "assistant", "metadata": metadata, "parts": fold(chunks)}


def user_message(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


# --- a request -------------------------------------------------------------------------

SUBMIT = "submit-message"
REGENERATE = "regenerate-message"


@dataclass(frozen=True)
class ChatRequest:
    """What one ``POST …/chat`` asks: a new user message (``user``: its id and
    text), answers to gates (``answers``: approval id and the answer's
    fields: ``decision``, a denial's ``reason``), or a regenerate of
    ``message_id`` (a run id; None: the last answer)."""

    chat_id: str
    trigger: str
    message_id: str | None
    user: tuple[str, str] | None
    answers: tuple[tuple[str, dict[str, Any]], ...]


def _bad(message: str) -> p.FrameError:
    return p.FrameError(p.E_BAD_FRAME, message)


def parse_chat(body: Any) -> ChatRequest:
    """The body ``DefaultChatTransport`` sends (``id``, ``messages``,
    ``trigger``, ``messageId``). Only the last message is read: the session's
    log is the history, never the client's copy of it."""
    if not isinstance(body, dict):
        raise _bad("the body must be a JSON object")
    chat_id = body.get("id")
    if not p.is_session_id(chat_id):
        raise _bad("'id' must be a chat id: 1 to 40 of A-Z a-z 0-9 _ -")
    trigger = body.get("trigger", SUBMIT)
    if trigger not in (SUBMIT, REGENERATE):
        raise _bad(f"'trigger' must be {SUBMIT!r} or {REGENERATE!r}")
    message_id = body.get("messageId")
    if message_id is not None and not (isinstance(message_id, str) and len(message_id) <= 128):
        raise _bad("'messageId' must be a string of at most 128 characters")
    if trigger == REGENERATE:
        return ChatRequest(chat_id, trigger, message_id, None, ())
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        raise _bad("'messages' must be a list ending with a message object")
    last = messages[-1]
    parts = last.get("parts")
    if not isinstance(parts, list):
        raise _bad("the last message's 'parts' must be a list")
    if last.get("role") == "user":
        message = last.get("id")
        if not isinstance(message, str) or not message or len(message) > p.MAX_ID_CHARS:
            raise _bad(f"the user message's 'id' must be 1 to {p.MAX_ID_CHARS} characters")
        text = "\n".join(
            part["text"]
            for part in parts
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
        return ChatRequest(chat_id, trigger, message_id, (message, text), ())
    if last.get("role") == "assistant":
        answers = []
        for part in parts:
            if not isinstance(part, dict):
                raise _bad("each of the last message's 'parts' must be an object")
            approval = part.get("approval")
            if part.get("state") == "approval-responded" and isinstance(approval, dict):
                if not isinstance(approval.get("id"), str) or not isinstance(
                    approval.get("approved"), bool
                ):
                    raise _bad("an approval response needs its 'id' and 'approved'")
                reason = approval.get("reason")
                if reason is not None and not isinstance(reason, str):
                    raise _bad("an approval response's 'reason' must be a string")
                answer: dict[str, Any] = {"decision": p.APPROVE if approval["approved"] else p.DENY}
                if reason and not approval["approved"]:
                    answer["reason"] = reason  # a denial's; an approval's is dropped
                answers.append((approval["id"], answer))
        if not answers:
            raise _bad("the last message is the assistant's and answers no approval")
        return ChatRequest(chat_id, trigger, message_id, None, tuple(answers))
    raise _bad("the last message's 'role' must be 'user' or 'assistant'")
