"""A decision of a gate (docs/protocol.md, "Commands"): which decision, a
denial's reason, an edit's arguments, a response's text, a question's
answer (its form's fields), and whether it decides the gate's whole step.
One rule for the ``decide`` frame and the REST API's body (``fields_of``);
the runtime checks the rest against the gate itself (an edit's arguments
against its tool's schema, an answer against its question's form)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sessions_app.wire import protocol as p
from sessions_app.wire.protocol import FrameError


@dataclass(frozen=True)
class Decide:
    request_id: Any
    approval_id: str
    decision: str
    # A denial's reason, which the model is told ("" for none).
    reason: str = ""
    # Every gate of its step still waiting, decided alike (Approve all / Deny all).
    whole_step: bool = False
    # An edit's arguments: the call runs with these.
    args: dict | None = None
    # A response instead of the call: the model is told it as the result.
    response: str = ""
    # A question's answer: its form's fields (checked against its schema).
    answer: dict | None = None


def parse_decide(frame: dict[str, Any]) -> Decide:
    rid = p.request_id_of(frame, strict=True)
    approval_id = p.string_field(frame, "approval_id")
    return Decide(rid, approval_id, **fields_of(frame, rid))


def fields_of(fields: Mapping[str, Any], rid: Any = None) -> dict[str, Any]:
    """A decision's fields, validated: ``decision`` (approve, deny, edit,
    respond, answer); ``reason`` with a denial only, at most
    ``MAX_REASON_CHARS``; ``args`` (an object) with an edit only and always;
    ``response`` (text of at most ``MAX_RESPONSE_CHARS``) with a response
    only and always; ``answer`` (an object) with an answer only and always;
    ``all`` a boolean, never with an edit, a response or an answer (each
    decides one gate)."""
    decision = fields.get("decision")
    if decision not in p.ALL_DECISIONS:
        raise FrameError(
            p.E_BAD_FRAME,
            "'decision' must be 'approve', 'deny', 'edit', 'respond' or 'answer'",
            rid,
        )
    reason = _text(fields, "reason", p.MAX_REASON_CHARS, rid)
    if reason and decision != p.DENY:
        raise FrameError(p.E_BAD_FRAME, "a 'reason' is given with a denial only", rid)
    args = fields.get("args")
    if args is not None and not _all_text(args):
        raise FrameError(p.E_BAD_FRAME, "'args' holds text that is not valid Unicode", rid)
    if (args is not None or decision == p.EDIT) and (
        decision != p.EDIT or not isinstance(args, dict)
    ):
        raise FrameError(
            p.E_BAD_FRAME, "an edit, and only an edit, carries 'args' (an object)", rid
        )
    response = _text(fields, "response", p.MAX_RESPONSE_CHARS, rid)
    if bool(response) != (decision == p.RESPOND) or ("response" in fields and not response):
        raise FrameError(
            p.E_BAD_FRAME, "a response, and only a response, carries 'response' (text)", rid
        )
    answer = _object(fields, "answer", decision == p.ANSWER, rid)
    whole = fields.get("all", False)
    if not isinstance(whole, bool):
        raise FrameError(p.E_BAD_FRAME, "'all' must be a boolean", rid)
    if whole and decision in (p.EDIT, p.RESPOND, p.ANSWER):
        raise FrameError(p.E_BAD_FRAME, f"'{decision}' decides one gate, never 'all'", rid)
    return {
        "decision": decision,
        "reason": reason,
        "whole_step": whole,
        "args": args,
        "response": response,
        "answer": answer,
    }


def _object(fields: Mapping[str, Any], name: str, wanted: bool, rid: Any) -> dict | None:
    """An object field that its decision, and only its decision, carries."""
    value = fields.get(name)
    if value is not None and not _all_text(value):
        raise FrameError(p.E_BAD_FRAME, f"'{name}' holds text that is not valid Unicode", rid)
    if (value is not None or wanted) and (not wanted or not isinstance(value, dict)):
        raise FrameError(
            p.E_BAD_FRAME, f"an {name}, and only an {name}, carries '{name}' (an object)", rid
        )
    return value


def _all_text(value: Any) -> bool:
    """Is every string in ``value`` (keys too, at any depth) storable text?"""
    if isinstance(value, str):
        return p.is_unicode(value)
    if isinstance(value, dict):
        return all(_all_text(k) and _all_text(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_all_text(v) for v in value)
    return True


def _text(fields: Mapping[str, Any], name: str, limit: int, rid: Any) -> str:
    """An optional text field, stripped ("" when absent)."""
    value = fields.get(name)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise FrameError(
            p.E_BAD_FRAME, f"'{name}' must be a string of at most {limit} characters", rid
        )
    if not p.is_unicode(value):
        raise FrameError(p.E_BAD_FRAME, f"'{name}' is not valid Unicode", rid)
    return value.strip()
