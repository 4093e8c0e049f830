"""A gated call: what a run parks on (``runs.park``) and the events that log
it. One object per gate, as the protocol's ``Push`` is one per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessions_app.log.events import NewEvent
from sessions_app.runtime import registry
from sessions_app.wire import protocol as p


@dataclass(frozen=True)
class Gate:
    """A gated call a run parks on (``park``'s request). ``note`` says why the
    gate is asked, on both its events (an unknown outcome asked again:
    ``runtime.toolcalls``); ``close_text`` is the text streamed before the
    call that no message stated, logged as its ``assistant.message`` first."""

    tool_call_id: str
    tool: str
    args: dict
    note: str = ""
    close_text: str | None = None

    def call(self) -> dict[str, Any]:
        """The call as its ``tool.call`` and ``approval.requested`` carry it."""
        call: dict[str, Any] = {"tool_call_id": self.tool_call_id, "tool": self.tool}
        call["args"] = self.args
        # How the cards show the arguments (the tool's own ``display``).
        if display := registry.display_of(self.tool):
            call["display"] = display
        if self.note:
            call["note"] = self.note
        return call

    def events(self, run_id: str, approval_id: str) -> list[NewEvent]:
        call = self.call()
        # Text streamed before the call and never stated whole ends here:
        # every client's open segment closes (no caret left streaming).
        closing = (
            []
            if self.close_text is None
            else [NewEvent(p.K_ASSISTANT_MESSAGE, {"text": self.close_text}, run_id)]
        )
        paused = {"stop_reason": p.STOP_REQUIRES_APPROVAL, "approval_id": approval_id}
        return [
            *closing,
            NewEvent(p.K_TOOL_CALL, call, run_id),
            NewEvent(p.K_APPROVAL_REQUESTED, {"approval_id": approval_id, **call}, run_id),
            NewEvent(p.K_RUN_PAUSED, paused, run_id),
        ]
