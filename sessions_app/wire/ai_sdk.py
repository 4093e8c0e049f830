"""The AI SDK's UI message stream (``x-vercel-ai-ui-message-stream: v1``):
one run of the session's log as the chunks ``useChat`` reads, no I/O.

``UiMessageStream(session_id, run_id)`` is an encoder (``wire.sse.Encoder``)
for ``delivery.reader.StreamReader``: fed the session's events in seq
order, it writes the run's message and ignores everything else (other
runs, the user's own input). A response is one request's part of the
message: it ends (``done``) at the run's ``run.finished`` with ``finish``,
or at a gate the replay did not see decided, with ``tool-approval-request``
and ``finish``; the client answers the gate with its next request. Every
chunk is ``data: <json>``, the last line ``data: [DONE]``.

What maps to what (docs/integrations.md):

- the assistant message's id is the ``run_id``; its metadata carries the
  session and run (``start``) and the seq range the response covered
  (``finish``);
- ``assistant.delta`` is ``text-start`` (once per segment) and
  ``text-delta``; ``assistant.message`` ends the segment (``text-end``),
  streaming first whatever the deltas had not said;
- ``tool.call`` is ``tool-input-available``; ``approval.requested`` is
  ``tool-approval-request`` (``reason``: the gate's ``note``);
  ``approval.decided`` is ``tool-approval-response``; ``tool.result`` is
  ``tool-output-available``, ``tool-output-error``, or
  ``tool-output-denied`` after a denial, and closes the step;
- ``run.resumed`` (the run went on in another process) is ``reset-step``
  and the step again with the open text cut to ``keep`` code points: the
  deltas that follow redo the rest, and no character shows twice;
- ``run.finished`` is ``finish`` (``end_turn`` → ``stop``, ``cancelled`` →
  ``other``, ``error`` → ``error``, after an ``error`` chunk with its
  message).

What a request asks, and the messages a page loads, are
``wire.ai_sdk_requests``.
"""

from __future__ import annotations

import json
from typing import Any

from sessions_app.wire import frames
from sessions_app.wire import protocol as p
from sessions_app.wire.sse import KEEP_ALIVE

HEADERS = {
    "x-vercel-ai-ui-message-stream": "v1",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
DONE_LINE = b"data: [DONE]\n\n"

FINISH_REASONS = {
    p.STOP_END_TURN: "stop",
    p.STOP_CANCELLED: "other",
    p.STOP_ERROR: "error",
    p.STOP_INTERRUPTED: "other",
}


def chunk_bytes(chunk: dict[str, Any]) -> bytes:
    text = json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)
    try:
        return b"data: " + text.encode() + b"\n\n"
    except UnicodeEncodeError:  # a lone surrogate a model streamed: escaped, still JSON
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


class UiMessageStream:
    """One response of one run's message (see the module's comment).

    ``stop_at_gate``: end at a gate that is not decided by the time the
    response has caught up with the log (a request's answer); a reader that
    only wants the whole message as it stands (``ui_messages``) folds on.
    """

    keep_alive = KEEP_ALIVE
    wants_history = False  # ``reset-step`` takes text back without it

    def __init__(self, session_id: str, run_id: str, *, stop_at_gate: bool = True) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.stop_at_gate = stop_at_gate
        self.done = False
        self.paused = False
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self.out: list[dict[str, Any]] = []
        # The step so far (since the last ``start-step``), for ``reset-step``.
        self.step: list[dict[str, Any]] = []
        self.open_id: str | None = None
        self._said = ""  # the open text, but for ``_raw``: what its deltas said
        self._raw: list[str] = []  # deltas' text as the frames wrote it (JSON)
        self._delta_head = b""  # a text-delta chunk of the open text, up to its delta
        self.marker = frames.run_marker(run_id)
        self.delta_marker = frames.delta_marker(run_id)
        self.parts = 0
        self.called: set[str] = set()
        self.denied: set[str] = set()
        self.gates: dict[str, str] = {}  # approval id -> tool call id

    # --- the encoder's calls ------------------------------------------------------

    def opening(self, session_id: str, epoch: str, head: int) -> bytes:
        meta = {"session_id": self.session_id, "run_id": self.run_id}
        self.emit(
            {"type": "start", "messageId": self.run_id, "messageMetadata": meta}, record=False
        )
        self.emit({"type": "start-step"}, record=False)
        return self.flush()

    def logged(self, text: str, seq: int) -> bytes:
        if self.done:
            return b""
        if self.open_id is not None:
            at = text.find(self.delta_marker, 0, frames.HEADER_CHARS)
            literal = frames.text_literal(text, at) if at >= 0 else None
            if literal is not None:  # the hot path: a delta of the open text, as written
                self.last_seq, self.paused = seq, False
                self._raw.append(literal)
                return self._delta_head + literal.encode() + b"}\n\n"
        if text.find(self.marker, 0, frames.HEADER_CHARS) < 0:
            return b""  # another run's event
        frame = json.loads(text)
        if frame.get("run_id") != self.run_id:
            return b""
        self.event(frame["kind"], frame.get("data") or {}, seq)
        return self.flush()

    @property
    def open_text(self) -> str:
        """What the open text said so far."""
        if self._raw:
            self._said += "".join(json.loads("[" + ",".join(self._raw) + "]"))
            self._raw = []
        return self._said

    def compacted(self, text: str, last: int) -> bytes:
        return b""  # a run's response is never compacted: it asks for every event

    def caught_up(self) -> bytes:
        if self.paused and self.stop_at_gate and not self.done:
            self.finish("tool-calls")
        return self.flush()

    def given_history(self, messages: list | None) -> bytes:
        return b""  # never asked for (``wants_history`` is never set)

    def reset(self, session_id: str, reason: str, message: str, **extra: Any) -> bytes:
        self.emit({"type": "error", "errorText": f"{reason}: {message}"})
        self.done = True
        return self.flush()

    # --- events -------------------------------------------------------------------

    def event(self, kind: str, data: dict[str, Any], seq: int) -> None:
        if self.first_seq is None:
            self.first_seq = seq
        self.last_seq = seq
        if kind != p.K_RUN_PAUSED:
            self.paused = False  # a gate decided since: the message goes on
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, data)

    def delta(self, data: dict[str, Any]) -> None:
        self.say(data.get("text") or "")

    def message(self, data: dict[str, Any]) -> None:
        whole = data.get("text") or ""
        if self.open_id is None:
            if not whole:
                return
            self.say(whole)
        elif whole.startswith(self.open_text):
            self.say(whole[len(self.open_text) :])
        else:  # the deltas said something else (a takeover redid them): the message stands
            self.rewrite(whole)
        self.close_text()

    def tool_call(self, data: dict[str, Any]) -> None:
        self.close_text()
        call_id = data["tool_call_id"]
        if call_id in self.called:
            return
        self.called.add(call_id)
        self.emit(
            {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": data["tool"],
                "input": data.get("args") or {},
            }
        )

    def approval_requested(self, data: dict[str, Any]) -> None:
        self.tool_call(data)
        self.gates[data["approval_id"]] = data["tool_call_id"]
        chunk = {
            "type": "tool-approval-request",
            "approvalId": data["approval_id"],
            "toolCallId": data["tool_call_id"],
        }
        if data.get("note"):
            chunk["reason"] = data["note"]
        self.emit(chunk)

    def approval_decided(self, data: dict[str, Any]) -> None:
        # An edit ran the call, a response or a form's answer answered it:
        # none is a denial.
        approved = data.get("decision") in (p.APPROVE, p.EDIT, p.RESPOND, p.ANSWER)
        if not approved and data["approval_id"] in self.gates:
            self.denied.add(self.gates[data["approval_id"]])
        self.emit(
            {
                "type": "tool-approval-response",
                "approvalId": data["approval_id"],
                "approved": approved,
            }
        )

    def tool_result(self, data: dict[str, Any]) -> None:
        self.close_text()
        call_id = data["tool_call_id"]
        output = data.get("output")
        # A denial the stream did not see decided (it began after the gate)
        # says so in its output: "denied", or "denied: <the reason>".
        said_denied = isinstance(output, str) and (
            output == "denied" or output.startswith("denied: ")
        )
        if call_id in self.denied or (not data.get("ok") and said_denied):
            self.emit({"type": "tool-output-denied", "toolCallId": call_id})
        elif data.get("ok"):
            self.emit({"type": "tool-output-available", "toolCallId": call_id, "output": output})
        else:
            text = output if isinstance(output, str) else json.dumps(output)
            self.emit({"type": "tool-output-error", "toolCallId": call_id, "errorText": text})
        self.emit({"type": "finish-step"}, record=False)
        self.emit({"type": "start-step"}, record=False)
        self.step = []

    def resumed(self, data: dict[str, Any]) -> None:
        keep = data.get("keep") or 0
        if self.open_id is not None and len(self.open_text) > keep:
            self.rewrite(self.open_text[:keep])

    def paused_at_gate(self, data: dict[str, Any]) -> None:
        self.paused = True

    def finished(self, data: dict[str, Any]) -> None:
        self.close_text()
        stop = data.get("stop_reason") or p.STOP_END_TURN
        if stop == p.STOP_ERROR:
            self.emit({"type": "error", "errorText": data.get("message") or "the run failed"})
        self.finish(FINISH_REASONS.get(stop, "other"))

    # --- chunks -------------------------------------------------------------------

    def say(self, text: str) -> None:
        if self.open_id is None:
            self.parts += 1
            self.open_id = f"{self.run_id}:{self.parts}"
            self._said, self._raw = "", []
            open_id = json.dumps(self.open_id).encode()
            self._delta_head = b'data: {"type":"text-delta","id":' + open_id + b',"delta":'
            self.emit({"type": "text-start", "id": self.open_id})
        if text:
            self._said = self.open_text + text
            self.emit({"type": "text-delta", "id": self.open_id, "delta": text}, record=False)

    def close_text(self) -> None:
        if self.open_id is not None:
            # The step keeps a closed text whole (``rewrite`` says it again).
            said = self.open_text
            if said:
                self.step.append({"type": "text-delta", "id": self.open_id, "delta": said})
            self.emit({"type": "text-end", "id": self.open_id})
            self.open_id, self._said, self._raw = None, "", []

    def rewrite(self, text: str) -> None:
        """The open text becomes ``text``: the step is reset and said again."""
        open_id = self.open_id
        texts: dict[str, str] = {}
        for chunk in self.step:
            if chunk["type"] == "text-delta":
                texts[chunk["id"]] = texts.get(chunk["id"], "") + chunk["delta"]
        texts[open_id] = text
        again: list[dict[str, Any]] = []
        for chunk in self.step:
            if chunk["type"] == "text-delta":
                continue
            again.append(chunk)
            if chunk["type"] == "text-start" and texts.get(chunk["id"]):
                again.append({"type": "text-delta", "id": chunk["id"], "delta": texts[chunk["id"]]})
        self.emit({"type": "reset-step"}, record=False)
        self.step = []
        for chunk in again:
            # A closed text stays in the step whole; the open one is ``_said``.
            self.emit(chunk, record=not (chunk["type"] == "text-delta" and chunk["id"] == open_id))
        self._said, self._raw = text, []

    def finish(self, reason: str) -> None:
        meta = {"first_seq": self.first_seq, "last_seq": self.last_seq}
        self.emit({"type": "finish-step"}, record=False)
        self.emit({"type": "finish", "finishReason": reason, "messageMetadata": meta})
        self.done = True

    def emit(self, chunk: dict[str, Any], *, record: bool = True) -> None:
        self.out.append(chunk)
        if record:
            self.step.append(chunk)

    def flush(self) -> bytes:
        out, self.out = self.out, []
        body = b"".join(chunk_bytes(chunk) for chunk in out)
        return body + DONE_LINE if self.done and out else body

    def take(self) -> list[dict[str, Any]]:
        """The chunks so far as objects, instead of bytes (``ai_sdk_requests``)."""
        out, self.out = self.out, []
        return out


_HANDLERS = {
    p.K_ASSISTANT_DELTA: UiMessageStream.delta,
    p.K_ASSISTANT_MESSAGE: UiMessageStream.message,
    p.K_TOOL_CALL: UiMessageStream.tool_call,
    p.K_APPROVAL_REQUESTED: UiMessageStream.approval_requested,
    p.K_APPROVAL_DECIDED: UiMessageStream.approval_decided,
    p.K_TOOL_RESULT: UiMessageStream.tool_result,
    p.K_RUN_RESUMED: UiMessageStream.resumed,
    p.K_RUN_PAUSED: UiMessageStream.paused_at_gate,
    p.K_RUN_FINISHED: UiMessageStream.finished,
}
