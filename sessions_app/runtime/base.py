"""The interface between the run executor and pluggable agents.

An agent is a class named by ``settings.AGENT_CLASS`` (``scripted``, ``openai``,
``anthropic`` or a dotted path) with two methods (docs/agents.md):

``start(ctx)``
    Handle the run's user input (``ctx.text``). Stream with ``ctx.delta``,
    finish the text with ``ctx.message``. To use a tool, call
    ``ctx.request_tool(tool, args, state)``: it logs ``tool.call``,
    ``approval.requested`` and ``run.paused`` in one transaction, saves
    ``state`` on the run and raises ``Parked``; the agent must let it
    propagate. Returning normally finishes the run with ``end_turn``; raising
    ``AgentError`` finishes it with ``error`` and the message.

``resume(ctx, outcome)``
    Called, maybe in another process and much later, once the gate is
    decided and the tool has run (or was denied). ``ctx.state`` is the state
    saved at the gate; ``outcome`` is the ``ToolOutcome``. It may request
    another tool, stream more text and return, like ``start``.

``resume_all(ctx, outcomes)``
    For an agent that asks for several calls in one step with
    ``ctx.request_tools([(tool, args), …], state)``: their gates open
    together, each is decided on its own, and once the last one is decided
    the approved calls run in the order asked; ``outcomes`` holds one
    ``ToolOutcome`` per call, in that order.

Agents hold nothing in memory between calls: everything they need to go on is
in ``ctx.state`` and the session's log.

Steps and checkpoints (docs/agents.md): ``ctx.state`` is saved with the run
at every checkpoint: each ``message``, each ``request_tool``, each tool
result, ``delta(text, checkpoint=True)`` and ``checkpoint()``. When the
process executing a run dies or stops, another goes on from the last
checkpoint: it calls ``resume`` again, with the same outcome, if that
checkpoint is a tool call's result, and otherwise ``start`` (even for a
checkpoint taken inside ``resume``), with ``ctx.state`` as saved there;
whatever the cut step had streamed since is superseded (``run.resumed``). An
agent keeps in ``ctx.state`` where it is, and sets it before the call that
ends a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Parked(BaseException):
    """Raised by ``RunContext.request_tool``: the run waits at an approval gate.
    A ``BaseException`` (as ``RunAborted`` is), so an agent's ``except
    Exception`` cannot swallow it."""


class AutoApproved(Parked):
    """Raised by ``request_tool`` for a tool that runs without asking: the
    executor runs the call at once and goes on with ``resume`` (``args[0]``:
    the tool call's id)."""


class AgentError(Exception):
    """An agent's reason to finish the run with ``stop_reason: error``."""


@dataclass(frozen=True)
class ToolOutcome:
    tool_call_id: str
    tool: str
    args: dict[str, Any]
    approved: bool
    ok: bool
    output: str


class RunContext(Protocol):
    run_id: str
    session_id: str
    text: str
    state: dict[str, Any]

    def delta(self, text: str, *, checkpoint: bool = False) -> None: ...

    def message(self, text: str) -> None: ...

    def checkpoint(self) -> None: ...

    def request_tool(self, tool: str, args: dict[str, Any], state: dict[str, Any]) -> None: ...

    def request_tools(
        self, calls: list[tuple[str, dict[str, Any]]], state: dict[str, Any]
    ) -> None: ...

    def sleep(self, seconds: float) -> None: ...

    def history(self) -> list[dict[str, str]]: ...


class Agent(Protocol):
    def start(self, ctx: RunContext) -> None: ...

    def resume(self, ctx: RunContext, outcome: ToolOutcome) -> None: ...
