"""protocol.py: validation rules, the rate limiter, and the JS mirror of its constants
(as docs/protocol.md specifies them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sessions_app.wire import protocol as p
from sessions_app.wire.decisions import parse_decide
from sessions_app.wire.rates import TokenBucket

CONSTANTS_JS = (
    Path(__file__).resolve().parents[2] / "static" / "sessions_app" / "js" / "wire" / "constants.js"
)


def _python_constants() -> dict[str, object]:
    return {
        name: value
        for name, value in vars(p).items()
        if re.fullmatch(r"[A-Z][A-Z0-9_]+", name) and isinstance(value, (int, float, str, tuple))
    }


def test_js_constants_mirror_python_exactly():
    """Every protocol constant exists in constants.js with the same value, and no other."""
    js = {
        # A long array is written over several lines, with a trailing comma.
        m.group(1): json.loads(re.sub(r",\s*\]", "]", m.group(2)))
        for m in re.finditer(
            r"^export const (\w+) = (.+?);$", CONSTANTS_JS.read_text(), re.M | re.S
        )
    }
    py = {k: list(v) if isinstance(v, tuple) else v for k, v in _python_constants().items()}
    assert js == py


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "resume", "protocol": 1, "session_id": "s", "after": True},
        {"type": "resume", "protocol": 1, "session_id": "s", "after": 2.0, "epoch": "e"},
        {"type": "resume", "protocol": 1, "session_id": "", "after": 0},
        {"type": "resume", "protocol": 1, "session_id": "s", "after": 0, "tab_id": 3},
        {"type": "resume", "protocol": 1, "session_id": "s", "after": 1, "epoch": ""},
    ],
)
def test_resume_bad_requests(frame):
    """Ill-typed or out-of-range resume fields are rejected as bad_request."""
    with pytest.raises(p.Rejection) as info:
        p.parse_resume(frame)
    assert info.value.reason == p.R_BAD_REQUEST


def test_resume_protocol_checked_first():
    """unsupported_protocol comes before any other check."""
    with pytest.raises(p.Rejection) as info:
        p.parse_resume({"type": "resume", "protocol": True, "after": -1})
    assert info.value.reason == p.R_UNSUPPORTED_PROTOCOL


def test_resume_epoch_ignored_at_zero():
    """With after 0 the epoch is ignored."""
    r = p.parse_resume(
        {"type": "resume", "protocol": 1, "session_id": "s", "after": 0, "epoch": "old"}
    )
    assert r.after == 0 and r.epoch is None


def test_send_text_limit_is_too_large():
    """A text over 32,000 characters is too_large; exactly 32,000 is fine."""
    ok = p.parse_send({"client_message_id": "m", "text": "x" * 32000})
    assert len(ok.text) == 32000
    with pytest.raises(p.FrameError) as info:
        p.parse_send({"client_message_id": "m", "text": "x" * 32001})
    assert info.value.code == p.E_TOO_LARGE


def test_unknown_fields_are_ignored():
    """Servers ignore unknown fields in known frames."""
    d = parse_decide({"approval_id": "a", "decision": "deny", "extra": {"x": 1}})
    assert (d.approval_id, d.decision) == ("a", "deny")


def test_token_bucket_allows_burst_then_rate():
    """60 at once pass, the 61st fails; 30 per second sustained keeps passing."""
    bucket = TokenBucket()
    assert all(bucket.take(0.0) for _ in range(60))
    assert not bucket.take(0.0)
    t = 0.0
    for _ in range(300):
        t += 1 / 30
        assert bucket.take(t)
    assert not bucket.take(t)


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "send", "client_message_id": "m", "text": "a\ud800"},
        {"type": "send", "client_message_id": "\udfff", "text": "hi"},
        {"type": "decide", "approval_id": "\ud800", "decision": "deny"},
        {"type": "cancel", "run_id": "r\udc00"},
        {"type": "send", "client_message_id": "m", "text": "a\x00b"},
        {"type": "send", "client_message_id": "m\x00", "text": "hi"},
    ],
)
def test_lone_surrogates_are_bad_frames(frame):
    """Strings that are not valid Unicode, or hold a NUL (no PostgreSQL text column
    can store one: the fuzz found it), are refused as bad_frame by the parsers."""
    parse = {"send": p.parse_send, "decide": parse_decide, "cancel": p.parse_cancel}
    with pytest.raises(p.FrameError) as err:
        parse[frame["type"]](frame)
    assert err.value.code == p.E_BAD_FRAME


def test_surrogate_pairs_are_fine():
    """A proper pair (an emoji written as two escapes) is valid text."""
    frame = p.decode('{"type":"send","client_message_id":"m","text":"\\ud83d\\ude00"}', None)
    assert p.parse_send(frame).text == "\U0001f600"


def test_send_interrupt_is_a_boolean_and_defaults_to_queueing():
    """A send's "interrupt" ("stop and send") is true or false, false when
    absent; anything else is a bad_frame naming it."""
    base = {"type": "send", "request_id": "r1", "client_message_id": "m1", "text": "hi"}
    assert p.parse_send(base).interrupt is False
    assert p.parse_send({**base, "interrupt": True}).interrupt is True
    for bad in ("yes", 1, None, [True]):
        with pytest.raises(p.FrameError) as err:
            p.parse_send({**base, "interrupt": bad})
        assert err.value.code == p.E_BAD_FRAME and "'interrupt'" in err.value.message
    assert p.FEATURE_INTERRUPT in p.FEATURES


def test_branch_fields_of_send_and_the_switch_frame_are_checked():
    """A send carries a regenerate (run id, no text, no edit_of) or an edit_of
    (with text); a switch names a run id of at most a run id's length."""
    regen = p.parse_send({"type": "send", "client_message_id": "m", "regenerate": "run_1"})
    assert (regen.regenerate, regen.text, regen.edit_of) == ("run_1", "", None)
    edit = p.parse_send({"type": "send", "client_message_id": "m", "text": "t", "edit_of": "run_1"})
    assert (edit.edit_of, edit.text, edit.regenerate) == ("run_1", "t", None)
    for bad in (
        {"regenerate": "run_1", "text": "t"},
        {"regenerate": "run_1", "edit_of": "run_2"},
        {"regenerate": ""},
        {"regenerate": 5},
        {"edit_of": "run_1"},
        {"edit_of": "r" * 41, "text": "t"},
    ):
        with pytest.raises(p.FrameError) as err:
            p.parse_send({"type": "send", "client_message_id": "m", **bad})
        assert err.value.code == p.E_BAD_FRAME, bad
    assert p.parse_switch({"type": "switch", "request_id": "r", "run_id": "run_1"}) == (
        "r",
        "run_1",
    )
    for bad in ({}, {"run_id": ""}, {"run_id": ["x"]}, {"run_id": "r" * 41}):
        with pytest.raises(p.FrameError):
            p.parse_switch({"type": "switch", **bad})
