"""The tool loop both model backends share: call the model, gate each tool
call it makes, answer the model with the outcomes, call it again.

A backend (``openai``, ``anthropic``) supplies only its wire format: the
first messages, one streamed model call, how a model turn with tool calls and
a tool's answer are written, and how the answers go back. The loop owns the
steps and their checkpoints (docs/agents.md, "Steps and checkpoints"):

- after a model call that asked for tools, ``ctx.state`` holds the
  conversation and the calls still to make, saved with ``ctx.checkpoint()``:
  a run taken over here makes the calls, it does not ask the model again;
- each call's gate saves the same, with the call being asked (``current``);
  ``resume`` adds the call's outcome and goes on;
- the final answer marks the state ``done`` before its message: a run taken
  over after it says nothing twice.

A call the model got wrong (an unknown tool, arguments that are not valid) is
not shown to the user: it is answered to the model as a failed call.
"""

from __future__ import annotations

import copy
from typing import Any

from sessions_app.runtime.base import AgentError, RunContext, ToolOutcome

# Model calls per run (the first plus one after each round of tools).
MAX_MODEL_CALLS = 8

Call = dict[str, str]  # {"id", "name", "arguments"}: one tool call of the model


class ToolLoopAgent:
    """An agent made of a model backend and this loop; subclass and fill the
    wire-format methods below."""

    # --- the backend's wire format --------------------------------------------------

    def first_messages(self, ctx: RunContext) -> list[dict[str, Any]]:
        """The conversation the first model call sees: the history and ``ctx.text``."""
        raise NotImplementedError

    def complete(self, ctx: RunContext, messages: list[dict[str, Any]]) -> tuple[str, list[Call]]:
        """One streamed model call (its text goes to ``ctx.delta``): (text, calls)."""
        raise NotImplementedError

    def model_turn(self, text: str, calls: list[Call]) -> dict[str, Any]:
        """The model's turn that asked for ``calls``, as the next request repeats it."""
        raise NotImplementedError

    def answer(self, call: Call, content: str, ok: bool) -> dict[str, Any]:
        """The answer to one call: its output, or why it failed."""
        raise NotImplementedError

    def add_answers(self, messages: list[dict[str, Any]], answers: list[dict[str, Any]]) -> None:
        """Put a round's answers into the conversation before the next model call."""
        raise NotImplementedError

    def parse_call(self, call: Call) -> tuple[dict[str, Any] | None, str | None]:
        """The call's arguments, or the error to answer the model with."""
        raise NotImplementedError

    # --- the loop ----------------------------------------------------------------------

    def start(self, ctx: RunContext) -> None:
        if ctx.state.get("done"):  # taken over after its answer: said once
            return
        if isinstance(ctx.state.get("messages"), list):
            # Taken over after a model call: go on with the calls it made.
            self._loop(ctx, copy.deepcopy(ctx.state))
            return
        self._loop(ctx, {"messages": self.first_messages(ctx)})

    def resume(self, ctx: RunContext, outcome: ToolOutcome) -> None:
        if ctx.state.get("done"):
            return
        state = copy.deepcopy(ctx.state or {})  # never mutate the runtime's copy
        if not isinstance(state.get("messages"), list) or not isinstance(
            state.get("current"), dict
        ):
            raise AgentError("the saved state of this run is unusable")
        # The runtime has its own tool_call_id; the model needs its own back.
        content = outcome.output if outcome.approved else "denied"
        answers = list(state.get("answers") or [])
        answers.append(self.answer(state.pop("current"), content, outcome.approved and outcome.ok))
        state["answers"] = answers
        self._loop(ctx, state)

    def _loop(self, ctx: RunContext, state: dict[str, Any]) -> None:
        messages: list[dict[str, Any]] = state["messages"]
        pending: list[Call] = list(state.get("pending") or [])
        answers: list[dict[str, Any]] = list(state.get("answers") or [])
        model_calls = int(state.get("model_calls", 0))
        while True:
            while pending:
                call = pending.pop(0)
                args, error = self.parse_call(call)
                if error is not None:
                    answers.append(self.answer(call, error, False))
                    continue
                gate = {
                    "messages": messages,
                    "pending": pending,
                    "answers": answers,
                    "current": call,
                    "model_calls": model_calls,
                }
                ctx.request_tool(call["name"], args, state=gate)
                return  # request_tool raises Parked; never reached with a real runtime
            if answers:
                self.add_answers(messages, answers)
                answers = []
            if model_calls >= MAX_MODEL_CALLS:
                raise AgentError(
                    f"the model was still calling tools after {MAX_MODEL_CALLS} rounds; stopped"
                )
            model_calls += 1
            text, calls = self.complete(ctx, messages)
            if not calls:
                ctx.state["done"] = True  # saved with the message
                ctx.message(text)
                return
            messages.append(self.model_turn(text, calls))
            pending = list(calls)
            # The model step is done: a takeover goes on from these calls.
            ctx.state = {"messages": messages, "pending": pending, "model_calls": model_calls}
            ctx.checkpoint()
