"""The scripted demo agent: deterministic answers for the demo and the tests.

It implements the commands in docs/protocol.md, "The demo agent's commands":
plain text gets a short streamed reply, ``/stream N [MS]`` is a load
generator, ``/echo TEXT`` streams TEXT back as written (Markdown, payloads),
``/markdown`` streams a sample answer in Markdown, ``/write`` and ``/sh`` go
through an approval gate (as does ``/tool NAME JSON``, any tool of the
registry), ``/parallel N [PATH]`` asks for N gated writes in one step
(their gates open together), ``/ask`` asks a small form (``ask_user``),
``/fail`` ends the run with an error, and in
tests ``/hold NAME`` streams until the test releases it
(``AGENT_TEST_HOLDS``). It holds nothing between calls: what ``resume``
needs is in ``ctx.state``.

It checkpoints (docs/agents.md, "Steps and checkpoints"): ``/stream`` at least
once a second of output, with the next token's index in ``ctx.state``; every
answer marks itself ``done`` before its ``message``, so a run taken over after
it says nothing twice.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from django.conf import settings

from sessions_app.runtime.base import AgentError, RunContext, ToolOutcome
from sessions_app.wire import strict_json

MAX_STREAM_N = 100_000
MAX_STREAM_MS = 10_000
DEFAULT_STREAM_MS = 20

STREAM_USAGE = "usage: /stream N [MS]"
WRITE_USAGE = "usage: /write PATH TEXT"
SH_USAGE = "usage: /sh CMD"
ECHO_USAGE = "usage: /echo TEXT"
TOOL_USAGE = "usage: /tool NAME [JSON ARGUMENTS]"
PARALLEL_USAGE = "usage: /parallel N [PATH]"
# What /ask asks (runtime.ask_user): one field of each kind a form has.
ASK_MESSAGE = "A few details for your profile, please."
ASK_FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 1, "maxLength": 80},
        "email": {"type": "string", "title": "Email", "format": "email"},
        "age": {"type": "integer", "title": "Age", "minimum": 1, "maximum": 150},
        "plan": {
            "type": "string",
            "title": "Plan",
            "enum": ["free", "team", "enterprise"],
            "enumNames": ["Free", "Team", "Enterprise"],
            "default": "free",
        },
        "start": {"type": "string", "title": "Start date", "format": "date"},
        "news": {"type": "boolean", "title": "Send me news", "default": False},
    },
    "required": ["name", "email", "plan"],
}
MAX_PARALLEL = 16
HOLD_USAGE = "usage: /hold NAME [MS] (tests only: AGENT_TEST_HOLDS names its folder)"
HOLD_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# /hold looks for its release this often (or every MS, if sooner).
HOLD_POLL_SECONDS = 0.02
# /echo and /markdown stream their text in this many deltas, this far apart.
ECHO_DELTAS = 12
ECHO_DELTA_PAUSE = 0.03

MARKDOWN_SAMPLE = """## Plan for the report

The agent's answers are **Markdown**: *emphasis*, `inline code`,
[links](https://www.djangoproject.com/) and lists.

1. Read the quarterly figures
2. Compare them with last year
   - revenue
   - costs
3. Write the summary

| Quarter | Revenue | Change |
|---|---:|:-:|
| Q1 | 1,200 | +4% |
| Q2 | 1,350 | +12% |

```python
def growth(before: float, after: float) -> float:
    # relative change, as a fraction
    return (after - before) / before
```

> Figures are unaudited.

- [x] gather data
- [ ] send the report
"""

REPLY_TAIL = "This is the scripted demo agent."
# A long input would otherwise become thousands of deltas.
MAX_REPLY_DELTAS = 20
REPLY_DELTA_PAUSE = 0.01

_INT_RE = re.compile(r"[+-]?\d{1,12}")
# /stream checkpoints at least this often.
CHECKPOINT_SECONDS = 1.0


class ScriptedAgent:
    """The built-in agent of the demo; see the module docstring."""

    # What the composer suggests trying (docs/agents.md, "Hints").
    hints = ["/stream 20 50", "/write notes.txt hello", "/sh ls"]

    def start(self, ctx: RunContext) -> None:
        if ctx.state.get("done"):  # taken over after its last message
            return
        text = ctx.text.strip()
        parts = text.split(None, 1)
        command = parts[0] if parts else ""
        rest = parts[1] if len(parts) == 2 else ""
        if command == "/stream":
            self._stream(ctx, rest)
        elif command == "/echo":
            if not rest:
                raise AgentError(ECHO_USAGE)
            self._echo(ctx, rest)
        elif command == "/markdown":
            self._echo(ctx, MARKDOWN_SAMPLE)
        elif command == "/write":
            self._write(ctx, rest)
        elif command == "/parallel":
            self._parallel(ctx, rest)
        elif command == "/ask":
            ctx.request_tool(
                "ask_user", {"message": ASK_MESSAGE, "schema": ASK_FORM}, state={"tool": "ask_user"}
            )
        elif command == "/sh":
            self._sh(ctx, rest)
        elif command == "/tool":
            self._tool(ctx, rest)
        elif command == "/hold":
            self._hold(ctx, rest)
        elif command == "/fail":
            raise AgentError("the scripted agent was asked to fail (/fail)")
        else:
            # Anything else, unknown slash commands included, is plain text.
            self._reply(ctx, text)

    def resume(self, ctx: RunContext, outcome: ToolOutcome) -> None:
        if ctx.state.get("done"):
            return
        ctx.state["done"] = True  # the message below ends the run's last step
        ctx.message(self._said(ctx.state, outcome))

    def resume_all(self, ctx: RunContext, outcomes: list[ToolOutcome]) -> None:
        """``/parallel``'s step: one line per call, in the order asked."""
        if ctx.state.get("done"):
            return
        ctx.state["done"] = True
        lines = [f"{i}. {self._said({}, outcome)}" for i, outcome in enumerate(outcomes, 1)]
        ctx.message("\n".join(lines))

    @staticmethod
    def _said(state: dict, outcome: ToolOutcome) -> str:
        """What the agent says of one call's outcome."""
        if not outcome.approved and outcome.ok:
            return f"You answered instead of {outcome.tool}: {outcome.output}"
        if outcome.tool == "ask_user":
            return f"Thank you. The form was {outcome.output}"
        why = outcome.output[len("denied: ") :] if outcome.output.startswith("denied: ") else ""
        denied = f" was denied ({why})." if why else " was denied."
        if outcome.output.startswith("expired: "):
            denied = " expired: nobody decided in time."
        if outcome.tool == "write_file":
            path = outcome.args.get("path", state.get("path", ""))
            if not outcome.approved:
                return f"The write to {path}{denied}"
            if outcome.ok:
                return f"Wrote to {path}: {outcome.output}"
            return f"The write to {path} failed: {outcome.output}"
        if outcome.tool == "terminal":
            command = outcome.args.get("command", state.get("command", ""))
            if not outcome.approved:
                return f"The command `{command}`{denied}"
            if outcome.ok:
                return f"$ {command}\n{outcome.output}"
            return f"The command `{command}` failed:\n{outcome.output}"
        # Any other tool of the registry (asked for with /tool).
        if not outcome.approved:
            return f"The call to {outcome.tool}{denied}"
        if outcome.ok:
            return f"{outcome.tool}: {outcome.output}"
        return f"{outcome.tool} failed: {outcome.output}"

    # --- commands ---------------------------------------------------------

    def _reply(self, ctx: RunContext, text: str) -> None:
        said = f"You said: {text}" if text else "You said nothing."
        if not said.endswith((".", "!", "?")):
            said += "."
        full = f"{said} {REPLY_TAIL}"
        # Split before each word so the pieces concatenate to exactly `full`.
        pieces = re.split(r"(?<=\s)(?=\S)", full)
        size = -(-len(pieces) // MAX_REPLY_DELTAS)
        chunks = ["".join(pieces[i : i + size]) for i in range(0, len(pieces), size)]
        for index, chunk in enumerate(chunks):
            if index:
                ctx.sleep(REPLY_DELTA_PAUSE)
            ctx.delta(chunk)
        ctx.state["done"] = True
        ctx.message(full)

    def _stream(self, ctx: RunContext, rest: str) -> None:
        args = rest.split()
        if not 1 <= len(args) <= 2 or not all(_INT_RE.fullmatch(arg) for arg in args):
            raise AgentError(STREAM_USAGE)
        count = int(args[0])
        millis = int(args[1]) if len(args) == 2 else DEFAULT_STREAM_MS
        if not 0 <= count <= MAX_STREAM_N:
            raise AgentError(f"N must be between 0 and {MAX_STREAM_N:,} ({STREAM_USAGE})")
        if not 0 <= millis <= MAX_STREAM_MS:
            raise AgentError(f"MS must be between 0 and {MAX_STREAM_MS:,} ({STREAM_USAGE})")
        # Taken over: go on from the token after the last checkpoint.
        first = int(ctx.state.get("next", 0))
        saved = time.monotonic()
        for index in range(first, count):
            if index > first and millis:
                ctx.sleep(millis / 1000)
            due = time.monotonic() - saved >= CHECKPOINT_SECONDS
            if due:
                ctx.state["next"] = index + 1
                saved = time.monotonic()
            ctx.delta(f"tok{index} ", checkpoint=due)
        ctx.state["done"] = True
        ctx.message("".join(f"tok{index} " for index in range(count)))

    def _hold(self, ctx: RunContext, rest: str) -> None:
        """Stream ``held0 ``, ``held1 ``, … (one at once, then one every MS
        milliseconds, a second by default; a checkpoint at most once a
        second) until the file NAME appears in ``AGENT_TEST_HOLDS``: a run
        busy for exactly as long as a test needs, not for a guessed time."""
        name, millis = self._hold_args(rest)
        released = Path(settings.AGENT_TEST_HOLDS) / name
        index = int(ctx.state.get("next", 0))  # taken over: on from the last checkpoint
        said: float | None = None  # one at once, released or not: a hold says something
        saved = time.monotonic() - CHECKPOINT_SECONDS
        while said is None or not released.exists():
            if said is None or time.monotonic() - said >= millis / 1000:
                said = time.monotonic()
                due = said - saved >= CHECKPOINT_SECONDS
                if due:
                    saved = said
                    ctx.state["next"] = index + 1
                ctx.delta(f"held{index} ", checkpoint=due)
                index += 1
            ctx.sleep(min(HOLD_POLL_SECONDS, millis / 1000))
        ctx.state["done"] = True
        ctx.message("".join(f"held{i} " for i in range(index)))

    @staticmethod
    def _hold_args(rest: str) -> tuple[str, int]:
        parts = rest.split()
        if not settings.AGENT_TEST_HOLDS or not 1 <= len(parts) <= 2:
            raise AgentError(HOLD_USAGE)
        if not HOLD_NAME.fullmatch(parts[0]):
            raise AgentError(HOLD_USAGE)
        millis = 1000
        if len(parts) == 2:
            if not re.fullmatch(r"[0-9]{1,5}", parts[1]) or not 1 <= int(parts[1]) <= MAX_STREAM_MS:
                raise AgentError(HOLD_USAGE)
            millis = int(parts[1])
        return parts[0], millis

    def _echo(self, ctx: RunContext, text: str) -> None:
        # Cut anywhere, mid-word and mid-syntax: the client renders every
        # prefix of the text, as it would a model's stream.
        size = max(1, -(-len(text) // ECHO_DELTAS))
        for index in range(0, len(text), size):
            if index:
                ctx.sleep(ECHO_DELTA_PAUSE)
            ctx.delta(text[index : index + size])
        ctx.state["done"] = True
        ctx.message(text)

    def _write(self, ctx: RunContext, rest: str) -> None:
        parts = rest.split(None, 1)
        if len(parts) != 2:
            raise AgentError(WRITE_USAGE)
        path, text = parts
        ctx.request_tool(
            "write_file",
            {"path": path, "text": text},
            state={"tool": "write_file", "path": path},
        )

    def _parallel(self, ctx: RunContext, rest: str) -> None:
        """N gated writes in one step (``write N`` to PATH, N = 1, 2, …):
        their gates open together, as a model's parallel tool calls do."""
        parts = rest.split()
        if not 1 <= len(parts) <= 2 or not re.fullmatch(r"[0-9]{1,2}", parts[0]):
            raise AgentError(PARALLEL_USAGE)
        count = int(parts[0])
        if not 1 <= count <= MAX_PARALLEL:
            raise AgentError(f"N must be between 1 and {MAX_PARALLEL} ({PARALLEL_USAGE})")
        path = parts[1] if len(parts) == 2 else "parallel.txt"
        calls = [("write_file", {"path": path, "text": f"write {i}"}) for i in range(1, count + 1)]
        ctx.request_tools(calls, state={"tool": "write_file", "path": path})

    def _tool(self, ctx: RunContext, rest: str) -> None:
        parts = rest.split(None, 1)
        if not parts:
            raise AgentError(TOOL_USAGE)
        try:
            args = strict_json.loads(parts[1]) if len(parts) == 2 else {}
        except json.JSONDecodeError as exc:
            raise AgentError(f"the arguments are not JSON ({exc.msg}); {TOOL_USAGE}") from None
        ctx.request_tool(parts[0], args, state={"tool": parts[0]})

    def _sh(self, ctx: RunContext, rest: str) -> None:
        if not rest:
            raise AgentError(SH_USAGE)
        ctx.request_tool("terminal", {"command": rest}, state={"tool": "terminal", "command": rest})
