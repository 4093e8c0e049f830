"""A ``decide`` frame (docs/protocol.md, "Commands"): which gate, which
decision, a denial's reason, and whether it decides the gate's whole step.
(The REST API's serializer and the dialects' ``web.conversation`` hold a
reason to the same rule: a denial's, at most ``MAX_REASON_CHARS``.)"""

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


def parse_decide(frame: dict[str, Any]) -> Decide:
    rid = p.request_id_of(frame, strict=True)
    approval_id = p.string_field(frame, "approval_id")
    decision = frame.get("decision")
    if decision not in p.DECISIONS:
        raise FrameError(p.E_BAD_FRAME, "'decision' must be 'approve' or 'deny'", rid)
    return Decide(rid, approval_id, decision, *decision_extras(frame, decision, rid))


def decision_extras(fields: Mapping[str, Any], decision: str, rid: Any = None) -> tuple[str, bool]:
    """A decision's ``reason`` and ``all``: a reason is text of at most
    ``MAX_REASON_CHARS``, given with a denial only; ``all`` is a boolean."""
    reason = fields.get("reason")
    if reason is not None:
        if not isinstance(reason, str) or len(reason) > p.MAX_REASON_CHARS:
            raise FrameError(
                p.E_BAD_FRAME,
                f"'reason' must be a string of at most {p.MAX_REASON_CHARS} characters",
                rid,
            )
        if not p.is_unicode(reason):
            raise FrameError(p.E_BAD_FRAME, "'reason' is not valid Unicode", rid)
        if reason.strip() and decision != p.DENY:
            raise FrameError(p.E_BAD_FRAME, "a 'reason' is given with a denial only", rid)
    whole = fields.get("all", False)
    if not isinstance(whole, bool):
        raise FrameError(p.E_BAD_FRAME, "'all' must be a boolean", rid)
    return (reason or "").strip(), whole
