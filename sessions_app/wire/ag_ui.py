"""AG-UI (1.0): one AG-UI run of a session's log as its events, built with the
``ag-ui-protocol`` package's types and encoder, no I/O.

``AgUiRun(thread_id, agui_run_id, run_id, epoch)`` is an encoder
(``wire.sse.Encoder``) for ``delivery.reader.StreamReader``. An AG-UI run
is one request's part of one of our runs: it opens with ``RUN_STARTED``
and ends (``done``) with ``RUN_FINISHED`` (outcome ``success``,
``cancelled``, or ``interrupt`` at a gate the replay did not see decided)
or ``RUN_ERROR``. What maps to what (docs/integrations.md):

- a text segment (``assistant.delta`` … ``assistant.message``) is
  ``TEXT_MESSAGE_START`` / ``_CONTENT`` / ``_END``, its ``messageId``
  ``<run id>:t<n>``, the run's n-th (the same in every response and in
  ``MESSAGES_SNAPSHOT``);
- ``tool.call`` is ``TOOL_CALL_START`` / ``_ARGS`` (the arguments as JSON) /
  ``_END``; ``tool.result`` is ``TOOL_CALL_RESULT`` (``content`` the output,
  ``"denied"`` after a denial);
- a response that goes on after a gate opens with ``MESSAGES_SNAPSHOT``
  (the conversation from the log, up to the gate);
- a gate (``approval.requested``, ``run.paused``) is an interrupt (a step's
  gates one each, in one ``RUN_FINISHED``; those seen decided are left out):
  ``{id: <approval id>, reason: "tool_approval", toolCallId, message,
  responseSchema}``, answered by the next ``RunAgentInput``'s ``resume``
  entry (``status: "resolved"`` with ``payload: {"approved": true|false}``;
  ``"cancelled"`` denies);
- ``run.resumed`` (the run went on in another process): the characters the
  redone deltas say again are not said twice. Where they say something
  else (a model asked again), or stop short of them, the characters the
  client holds and the log no longer says are taken back:
  ``MESSAGES_SNAPSHOT`` (the conversation before that event, and the open
  message cut back to what the log still says; it stays open), then what
  the event says. The encoder asks for that conversation (``wants_history``,
  answered by ``given_history``): the reader fetches it.

Resume, this server's extension: every event carries ``id:``, the position
of what it says in the log. ``<epoch>:<seq>`` on the last event a logged
event becomes, ``<epoch>:<seq>/<k>`` on the ones before it (``k`` from 0).
A request sent again with ``Last-Event-ID`` gets ``RUN_STARTED`` and then
exactly what followed that position; a text message or tool call left open
there is opened again with the same id (``TEXT_MESSAGE_START`` of an id
the client holds continues it).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    Interrupt,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from sessions_app.wire import frames
from sessions_app.wire import protocol as p
from sessions_app.wire.ag_ui_messages import text_id

KEEP_ALIVE = b": keep-alive\n\n"
APPROVAL_REASON = "tool_approval"
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        # A denial's reason; an approval's own arguments (an edit); a
        # response instead of the call (docs/integrations.md).
        "reason": {"type": "string"},
        "args": {"type": "object"},
        "response": {"type": "string"},
    },
    "required": ["approved"],
}
_POSITION = re.compile(r"([A-Za-z0-9_-]{1,32}):(\d{1,19})(?:/(\d{1,4}))?")
_ENCODER = EventEncoder()


def parse_position(value: str | None) -> tuple[str, int, int] | None:
    """``Last-Event-ID`` as (epoch, seq, events of that seq received); None if absent or
    not one of ours."""
    found = _POSITION.fullmatch(value or "")
    if found is None:
        return None
    epoch, seq, k = found.groups()
    return epoch, int(seq), (int(k) + 1 if k is not None else -1)


@dataclass(frozen=True)
class Pickup:
    """Where an AG-UI response picks up: ``position``, the ``Last-Event-ID``
    it resumes after (nothing before it is written: its epoch, seq, and how
    much of that seq was received, -1 all of it); ``snapshot``, the
    conversation before the run, for its ``MESSAGES_SNAPSHOT``; ``segments``,
    the run's text messages said before this response."""

    position: tuple[str, int, int] | None = None
    snapshot: list | None = None
    segments: int = 0
    # The run's gates asked before the pickup and not decided by then (a
    # step answered in part: those left are interrupts again).
    gates: tuple[dict[str, Any], ...] = ()


class AgUiRun:
    """One AG-UI run's events (see the module's comment), from ``pickup``."""

    keep_alive = KEEP_ALIVE

    def __init__(
        self, thread_id: str, agui_run_id: str, run_id: str, epoch: str, pickup: Pickup = Pickup()
    ) -> None:
        self.thread_id = thread_id
        self.agui_run_id = agui_run_id
        self.run_id = run_id
        self.epoch = epoch
        self.quiet = pickup.position
        self.snapshot = pickup.snapshot
        self.segments = pickup.segments
        self.done = False
        # The gates asked and not seen decided, in the order asked (a step
        # opens several at once: one interrupt each).
        self.gates: dict[str, dict[str, Any]] = {g["approval_id"]: g for g in pickup.gates}
        self.paused = bool(self.gates)
        self.open_id: str | None = None
        self._said = ""  # what the open message said, but for ``_raw``
        self._raw: list[str] = []  # deltas as the frames wrote them (JSON strings)
        self._content: tuple[str, str] | None = None  # the open message's CONTENT event
        self.redo = ""  # said already, and being said again after a takeover
        # A redo said something else, or stopped short: this seq's events
        # wait for the conversation (``given_history``), a ``_TakeBack`` among
        # them where the snapshot goes.
        self.wants_history = False
        self._held: tuple[int, str | None] | None = None
        self.marker = frames.run_marker(run_id)
        self.delta_marker = frames.delta_marker(run_id)
        self.out: list[bytes] = []
        self.pending: list[Any] = []  # this seq's events, until it is written
        self.ts = _now()  # the logged event's time, in ms (AG-UI's timestamp)

    # --- the encoder's calls ------------------------------------------------------

    def opening(self, session_id: str, epoch: str, head: int) -> bytes:
        now = _now()
        events: list[Any] = [
            RunStartedEvent(thread_id=self.thread_id, run_id=self.agui_run_id, timestamp=now)
        ]
        if self.snapshot is not None and self.quiet is None:
            events.append(MessagesSnapshotEvent(messages=self.snapshot, timestamp=now))
        return b"".join(_ENCODER.encode(event).encode() for event in events)

    def logged(self, text: str, seq: int) -> bytes:
        if self.done:
            return b""
        if self._content is not None and not self.redo and self.quiet is None:
            at = text.find(self.delta_marker, 0, frames.HEADER_CHARS)
            literal = frames.text_literal(text, at) if at >= 0 else None
            if literal is not None:  # the hot path: a delta of the open message, as written
                self.paused = False
                self._raw.append(literal)
                before, after = self._content
                return f"id: {self.epoch}:{seq}\n{before}{literal}{after}".encode()
        if text.find(self.marker, 0, frames.HEADER_CHARS) < 0:
            return b""  # another run's event
        frame = json.loads(text)
        if frame.get("run_id") != self.run_id:
            return b""
        self.ts = _millis(frame.get("ts"))
        opened = self.open_id
        self.event(frame["kind"], frame.get("data") or {}, seq)
        if any(isinstance(event, _TakeBack) for event in self.pending):
            self.wants_history, self._held = True, (seq, opened)
            return b""  # written with the snapshot (``given_history``)
        return self.write(seq, opened)

    def given_history(self, messages: list | None) -> bytes:
        """The conversation before the seq that asked (``history``), of this
        run's path: the snapshot that takes back what the client holds and
        the log no longer says, the open message cut back (None: no one can
        fetch it, and the client keeps those characters)."""
        seq, opened = self._held or (None, None)
        self.wants_history, self._held = False, None
        pending: list[Any] = []
        for event in self.pending:
            if isinstance(event, _TakeBack):
                if messages is not None:
                    said = event.said
                    cut = AssistantMessage(id=event.message_id, role="assistant", content=said)
                    snapshot = MessagesSnapshotEvent(messages=[*messages, cut], timestamp=self.ts)
                    pending.append(snapshot)
            else:
                pending.append(event)
        self.pending = pending
        return self.write(seq, opened)

    def compacted(self, text: str, last: int) -> bytes:
        return b""  # an AG-UI run asks for every event of its run

    def caught_up(self) -> bytes:
        if self.paused and self.gates and not self.done:
            interrupts = [
                Interrupt(
                    id=gate["approval_id"],
                    reason=APPROVAL_REASON,
                    message=gate.get("note") or f"Run {gate['tool']}?",
                    tool_call_id=gate["tool_call_id"],
                    response_schema=APPROVAL_SCHEMA,
                )
                for gate in self.gates.values()
            ]
            self.ts = _now()
            self.finish(RunFinishedInterruptOutcome(interrupts=interrupts))
            return self.write(None, None)
        return b""

    def finished_now(self) -> bytes:
        """``RUN_FINISHED`` (success) at once: a join with no run going."""
        self.finish(RunFinishedSuccessOutcome())
        return self.write(None, None)

    def reset(self, session_id: str, reason: str, message: str, **extra: Any) -> bytes:
        self.done = True
        event = RunErrorEvent(message=message, code=reason, timestamp=_now())
        return _ENCODER.encode(event).encode()

    # --- events -------------------------------------------------------------------

    def event(self, kind: str, data: dict[str, Any], seq: int) -> None:
        # A run paused stays so while its step's gates are decided one by one.
        if kind not in (p.K_RUN_PAUSED, p.K_APPROVAL_DECIDED):
            self.paused = False
        if kind == p.K_ASSISTANT_DELTA:
            self.say(data.get("text") or "", seq)
        elif kind == p.K_ASSISTANT_MESSAGE:
            whole = data.get("text") or ""
            if self.open_id is None and whole:
                self.say(whole, seq)
            elif whole.startswith(self.said):
                self.say(whole[len(self.said) :], seq)
            self.close_text()
        elif kind == p.K_TOOL_CALL:
            self.close_text()
            call_id = data["tool_call_id"]
            self.emit(ToolCallStartEvent(tool_call_id=call_id, tool_call_name=data["tool"]))
            args = json.dumps(data.get("args") or {}, ensure_ascii=False)
            self.emit(ToolCallArgsEvent(tool_call_id=call_id, delta=args))
            self.emit(ToolCallEndEvent(tool_call_id=call_id))
        elif kind == p.K_APPROVAL_REQUESTED:
            self.gates[data["approval_id"]] = data
        elif kind == p.K_APPROVAL_DECIDED:
            self.gates.pop(data.get("approval_id"), None)
        elif kind == p.K_RUN_PAUSED:
            self.paused = True
        elif kind == p.K_TOOL_RESULT:
            self.close_text()
            output = data.get("output")
            content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            self.emit(
                ToolCallResultEvent(
                    message_id=f"{self.run_id}:{seq}",
                    tool_call_id=data["tool_call_id"],
                    content=content,
                    role="tool",
                )
            )
        elif kind == p.K_RUN_RESUMED:
            keep = data.get("keep") or 0
            if self.open_id is not None and len(self.said) > keep:
                self.redo = self.said[keep:] + self.redo
                self.said = self.said[:keep]
        elif kind == p.K_RUN_FINISHED:
            self.close_text()
            stop = data.get("stop_reason") or p.STOP_END_TURN
            if stop == p.STOP_ERROR:
                self.emit(RunErrorEvent(message=data.get("message") or "the run failed"))
                self.done = True
            elif stop == p.STOP_CANCELLED:
                self.finish(RunFinishedCancelledOutcome())
            else:
                self.finish(RunFinishedSuccessOutcome())

    def say(self, text: str, seq: int) -> None:
        if self.redo:
            same = _common(self.redo, text)
            self.said += text[:same]
            self.redo = self.redo[same:] if same < len(self.redo) else ""
            text = text[same:]
            if self.redo and text:
                # A redo that says something else: the client holds
                # ``redo``, which the log no longer says. Taken back.
                self.take_back()
        if not text:
            return
        if self.open_id is None:
            self.open_id, self.said = text_id(self.run_id, self.segments), ""
            self.emit(TextMessageStartEvent(message_id=self.open_id, role="assistant"))
            self._content = _content_template(self.open_id)
        self.said += text
        self.emit(TextMessageContentEvent(message_id=self.open_id, delta=text))

    def take_back(self) -> None:
        """The client holds ``redo`` past what the open message says: the
        snapshot that cuts it back goes here (``given_history``)."""
        self.pending.append(_TakeBack(self.open_id, self.said))
        self.redo = ""

    def close_text(self) -> None:
        if self.open_id is not None and self.redo:
            self.take_back()  # a redo that stopped short of what it said before
        if self.open_id is not None:
            self.emit(TextMessageEndEvent(message_id=self.open_id))
            self.segments += 1
        self.open_id, self.said, self.redo, self._content = None, "", "", None

    @property
    def said(self) -> str:
        """What the open message said so far."""
        if self._raw:
            self._said += "".join(json.loads("[" + ",".join(self._raw) + "]"))
            self._raw = []
        return self._said

    @said.setter
    def said(self, value: str) -> None:
        self._said, self._raw = value, []

    def finish(self, outcome) -> None:
        self.emit(
            RunFinishedEvent(thread_id=self.thread_id, run_id=self.agui_run_id, outcome=outcome)
        )
        self.done = True

    def emit(self, event: Any) -> None:
        event.timestamp = self.ts
        self.pending.append(event)

    # --- positions ----------------------------------------------------------------

    def write(self, seq: int | None, opened: str | None) -> bytes:
        """This seq's events, each with its position; those up to the
        resume's position are not written, and what was open there is
        opened again first."""
        events, self.pending = self.pending, []
        out: list[bytes] = []
        for k, event in enumerate(events):
            terminal = isinstance(event, RunFinishedEvent | RunErrorEvent)
            if seq is not None and self.before_position(seq, k) and not terminal:
                continue  # the client has it (its run's end it gets again: RUN_STARTED needs one)
            if self.quiet is not None:
                self.quiet = None
                out += self.reopen(opened, events[:k])
            if seq is None:
                position = None
            elif k == len(events) - 1:
                position = f"{self.epoch}:{seq}"
            else:
                position = f"{self.epoch}:{seq}/{k}"
            out.append(_sse(event, position))
        return b"".join(out)

    def before_position(self, seq: int, k: int) -> bool:
        if self.quiet is None:
            return False
        _, at, received = self.quiet
        return seq < at or (seq == at and (received < 0 or k < received))

    def reopen(self, opened: str | None, before: list[Any]) -> list[bytes]:
        """What a resumed response opens again: the text message or tool call
        open at the position (``TEXT_MESSAGE_START`` of an id the client holds
        continues that message)."""
        again: list[bytes] = []
        open_text = opened
        open_call = None
        for event in before:
            if isinstance(event, TextMessageStartEvent):
                open_text = event.message_id
            elif isinstance(event, TextMessageEndEvent):
                open_text = None
            elif isinstance(event, ToolCallStartEvent):
                open_call = event
            elif isinstance(event, ToolCallEndEvent):
                open_call = None
        if open_text is not None:
            start = TextMessageStartEvent(message_id=open_text, role="assistant", timestamp=_now())
            again.append(_sse(start, None))
        if open_call is not None:
            again.append(_sse(open_call, None))
        return again


class _TakeBack:
    """Where a snapshot goes among a seq's events (``AgUiRun.take_back``)."""

    def __init__(self, message_id: str | None, said: str) -> None:
        self.message_id, self.said = message_id, said


_MARK = "\ue000"


def _content_template(message_id: str) -> tuple[str, str]:
    """The encoder's own ``TEXT_MESSAGE_CONTENT`` event for this message, cut
    around its delta (the hot path fills it in; a content event carries no
    timestamp there: the message's start and end do)."""
    body = _ENCODER.encode(TextMessageContentEvent(message_id=message_id, delta=_MARK))
    before, after = body.split(json.dumps(_MARK, ensure_ascii=False), 1)
    return before, after


def _now() -> int:
    return int(time.time() * 1000)


_MINUTES: dict[str, int] = {}


def _millis(ts: str | None) -> int:
    """The protocol's ``ts`` (ISO 8601 in UTC, ``…THH:MM:SS.ffffffZ``) in ms
    since the epoch; the minute's start is computed once."""
    if not ts:
        return _now()
    if len(ts) >= 23 and ts[16] == ":" and ts[19] == ".":
        minute = _MINUTES.get(ts[:16])
        if minute is None:
            if len(_MINUTES) > 1000:
                _MINUTES.clear()
            start = datetime.fromisoformat(ts[:16] + ":00+00:00")
            minute = _MINUTES[ts[:16]] = int(start.timestamp()) * 1000
        return minute + int(ts[17:19]) * 1000 + int(ts[20:23])
    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _sse(event: Any, position: str | None) -> bytes:
    body = _ENCODER.encode(event)
    return (f"id: {position}\n{body}" if position else body).encode()
