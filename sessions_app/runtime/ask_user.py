"""``ask_user``: the tool an agent asks a person a form with.

A call of it is a question (``runtime.questions``) with the form the agent
wrote (``schema``, the subset of JSON Schema ``wire.forms`` renders): every
tab shows the card with its form, a person answers it (checked on the
server) or declines, once, from any tab, the API or the admin, and the
answer is the call's result. It runs without a gate of its own (asking is
harmless) and may be asked again after a crash (its question is closed
``cancelled`` with its worker, and the call asks anew). It waits at most
``AGENT_MCP_ASK_SECONDS``.

The scripted agent's ``/ask`` asks a small form with it; a model backend
offers it to the model like any tool of ``AGENT_TOOLS``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sessions_app.runtime import questions
from sessions_app.runtime.registry import Tool
from sessions_app.wire import forms
from sessions_app.wire import protocol as p

MAX_MESSAGE_CHARS = 2_000


class AskUser(Tool):
    name = "ask_user"
    description = (
        "Ask the user to fill in a short form and wait for the answer. `schema` is a JSON "
        "Schema object of flat fields (string with optional format email, uri, date or "
        "date-time, or enum; number; integer; boolean), with titles, defaults and `required`."
    )
    parameters = {
        "type": "object",
        "properties": {
            "message": {"type": "string", "description": "What you ask, and why."},
            "schema": {"type": "object", "description": "The form: a JSON Schema object."},
        },
        "required": ["message", "schema"],
    }
    display = [{"arg": "message", "label": "Asks", "as": "block"}]
    idempotent = True
    auto_approve = True

    def validate(self, args: Any) -> str | None:
        if not isinstance(args, dict) or set(args) != {"message", "schema"}:
            return "ask_user takes exactly 'message' and 'schema'"
        message = args["message"]
        if not isinstance(message, str) or not message.strip():
            return "ask_user: 'message' is the question, as text"
        if len(message) > MAX_MESSAGE_CHARS or not p.is_unicode(message) or "\x00" in message:
            return f"ask_user: 'message' is at most {MAX_MESSAGE_CHARS} characters of text"
        if not isinstance(args["schema"], dict):
            return "ask_user: 'schema' is a JSON Schema object"
        return None

    def execute(self, args: dict[str, Any], workspace: Path) -> tuple[bool, str]:
        # A form no card renders is the call's failure, told to the model
        # (which may ask again), not the run's end.
        problem = forms.schema_problem(args["schema"])
        if problem:
            return False, f"ask_user: the form cannot be shown: {problem}"
        asker = questions.current()
        if asker is None:  # not inside a run's call: nobody to ask
            return False, "cancelled: there is nobody to ask here"
        decision, answer = asker.ask(args["message"], args["schema"])
        if decision in (p.APPROVE, p.ANSWER):
            return True, "answered: " + json.dumps(answer, ensure_ascii=False, sort_keys=True)
        if decision == p.DENY:
            return False, "declined: the user chose not to answer"
        return False, "cancelled: nobody answered"
