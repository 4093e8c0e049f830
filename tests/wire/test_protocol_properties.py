"""protocol.py's parse functions, property-tested: any JSON a client can send is
either accepted as a well-formed command or refused with the documented error,
never an exception of another kind (see docs/reliability.md, the fuzz)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.wire import protocol as p
from sessions_app.wire.decisions import parse_decide

# JSON values with the edges that matter: lone surrogates, huge and negative
# numbers, floats, booleans standing in for integers, nesting.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(st.characters(codec=None, blacklist_categories=()), max_size=80)
    | st.sampled_from(["\ud800", "a\udfffb", "", "x" * 5000, "s_abc", "approve", "deny"])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=8)
FIELDS = [
    "type",
    "protocol",
    "request_id",
    "tab_id",
    "title",
    "session_id",
    "after",
    "epoch",
    "client_message_id",
    "text",
    "approval_id",
    "decision",
    "run_id",
    "seq",
]
frames = st.dictionaries(st.sampled_from(FIELDS), values, max_size=8)
PARSERS = [
    p.parse_start,
    p.parse_send,
    parse_decide,
    p.parse_cancel,
    p.parse_sync,
    p.parse_ack,
]
CODES = {p.E_BAD_FRAME, p.E_UNSUPPORTED_PROTOCOL, p.E_TOO_LARGE}


@settings(max_examples=400, deadline=None)
@given(frames, st.sampled_from(PARSERS))
def test_a_command_parser_accepts_or_refuses_with_a_documented_code(frame, parse):
    """Every parser either returns or raises FrameError with a documented code, and
    what it accepts is valid Unicode (nothing unencodable reaches the database)."""
    try:
        parsed = parse(frame)
    except p.FrameError as exc:
        assert exc.code in CODES
        # A reply echoes only an id a client could have meant as one.
        assert p.request_id_of({"request_id": exc.request_id}) == exc.request_id
        return
    for value in getattr(parsed, "__dict__", {}).values():
        if isinstance(value, str):
            assert p.is_unicode(value)


@settings(max_examples=400, deadline=None)
@given(frames)
def test_a_resume_is_accepted_or_rejected_with_a_reason(frame):
    """parse_resume answers anything with a Resume or a Rejection (resume_rejected)."""
    try:
        resume = p.parse_resume(frame)
    except p.Rejection as exc:
        assert exc.reason in (p.R_BAD_REQUEST, p.R_UNSUPPORTED_PROTOCOL)
        return
    assert 0 <= resume.after <= 2**63 - 1
    assert p.is_unicode(resume.session_id)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=200), values.map(json.dumps), frames.map(json.dumps)))
def test_decode_returns_an_object_with_a_string_type_or_refuses(text):
    """decode turns any text into a frame dict with a string 'type', or a FrameError."""
    try:
        frame = p.decode(text, None)
    except p.FrameError as exc:
        assert exc.code in (p.E_BAD_JSON, p.E_BAD_FRAME)
        return
    assert isinstance(frame, dict) and isinstance(frame["type"], str)
