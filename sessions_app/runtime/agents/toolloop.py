"""The tool loop both model backends share: call the model, gate the tool
calls it makes (all of one turn's at once), answer the model with the outcomes, call it again.

A backend (``openai``, ``anthropic``) supplies only its wire format: the
first messages, one streamed model call, how a model turn with tool calls and
a tool's answer are written, and how the answers go back. The loop owns the
steps and their checkpoints (docs/agents.md, "Steps and checkpoints"):

- after a model call that asked for tools, ``ctx.state`` holds the
  conversation and the calls still to make, saved with ``ctx.checkpoint()``:
  a run taken over here makes the calls, it does not ask the model again;
- the calls one model turn asks for are gated together: one alone saves the
  same, with the call being asked (``current``), and ``resume`` adds its
  outcome; several open their gates at once (``ctx.request_tools``), saved
  with the calls (``step``), and ``resume_all`` adds every outcome, in the
  model's order;
- the final answer marks the state ``done`` before its message: a run taken
  over after it says nothing twice.

A call the model got wrong (an unknown tool, arguments that are not valid) is
not shown to the user: it is answered to the model as a failed call.
"""

from __future__ import annotations

import copy
import json
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
        answers = list(state.get("answers") or [])
        answers.append(self._answer_of(state.pop("current"), outcome))
        state["answers"] = answers
        self._loop(ctx, state)

    def resume_all(self, ctx: RunContext, outcomes: list[ToolOutcome]) -> None:
        """A step of several calls, all decided and run: each call answered
        in the order the model asked."""
        if ctx.state.get("done"):
            return
        state = copy.deepcopy(ctx.state or {})
        step = state.pop("step", None)
        if not isinstance(state.get("messages"), list) or not isinstance(step, list):
            raise AgentError("the saved state of this run is unusable")
        if len(step) != len(outcomes):
            raise AgentError("the step's outcomes do not match its calls")
        answers = list(state.get("answers") or [])
        answers += [self._answer_of(call, o) for call, o in zip(step, outcomes, strict=True)]
        state["answers"] = answers
        self._loop(ctx, state)

    def _answer_of(self, call: Call, outcome: ToolOutcome) -> dict[str, Any]:
        """The model's answer to one call: its output; a denial says so (with
        the person's reason), a person's response instead of the call is the
        result, and a call run with arguments the person edited says which."""
        content = outcome.output if outcome.approved else (outcome.output or "denied")
        asked, _ = self.parse_call(call)
        if outcome.approved and asked is not None and outcome.args != asked:
            edited = json.dumps(outcome.args, ensure_ascii=False)
            content = f"(the user edited the arguments; it ran with {edited})\n{content}"
        return self.answer(call, content, outcome.ok)

    @staticmethod
    def _ask(
        ctx: RunContext,
        asked: list[tuple[Call, dict[str, Any]]],
        messages: list[dict[str, Any]],
        answers: list[dict[str, Any]],
        model_calls: int,
    ) -> None:
        """Gate the model's calls: one alone (``resume``), or several at
        once, their gates open together (``resume_all``)."""
        gate: dict[str, Any] = {
            "messages": messages,
            "pending": [],
            "answers": answers,
            "model_calls": model_calls,
        }
        if len(asked) == 1:
            call, args = asked[0]
            ctx.request_tool(call["name"], args, state={**gate, "current": call})
        else:
            gate["step"] = [call for call, _ in asked]
            ctx.request_tools([(call["name"], args) for call, args in asked], state=gate)

    def _loop(self, ctx: RunContext, state: dict[str, Any]) -> None:
        messages: list[dict[str, Any]] = state["messages"]
        pending: list[Call] = list(state.get("pending") or [])
        answers: list[dict[str, Any]] = list(state.get("answers") or [])
        model_calls = int(state.get("model_calls", 0))
        while True:
            if pending:
                asked: list[tuple[Call, dict[str, Any]]] = []
                for call in pending:
                    args, error = self.parse_call(call)
                    if error is not None:
                        answers.append(self.answer(call, error, False))
                    else:
                        asked.append((call, args))
                pending = []
                if asked:
                    self._ask(ctx, asked, messages, answers, model_calls)
                    return  # it raises Parked; never reached with a real runtime
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
