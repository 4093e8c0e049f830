"""The UI message stream encoder (sessions_app/wire/ai_sdk.py), as pure code:
events in, chunks out, folded back as the AI SDK folds them."""

from __future__ import annotations

import json

import pytest

from sessions_app.wire import ai_sdk, frames
from sessions_app.wire import ai_sdk_requests as requests
from sessions_app.wire import protocol as p

RUN = "run_1"


def frame(seq: int, kind: str, data: dict, run_id: str = RUN) -> str:
    """An event frame's text as the server writes it (``frames.dumps``)."""
    event = {"type": "event", "session_id": "s1", "seq": seq, "kind": kind, "run_id": run_id}
    return frames.dumps({**event, "data": data})


def chunks(raw: bytes) -> list[dict]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block and block != "data: [DONE]":
            out.append(json.loads(block.removeprefix("data: ")))
    return out


def feed(encoder, events) -> list[dict]:
    out = chunks(encoder.opening("s1", "e", 0))
    for seq, (kind, data, *run) in enumerate(events, start=10):
        out += chunks(encoder.logged(frame(seq, kind, data, *run), seq))
    return out + chunks(encoder.caught_up())


def test_a_takeover_resets_the_step_and_no_character_shows_twice():
    """run.resumed keeps ``keep`` code points of the open text: the step is
    reset and said again cut there, and the redone deltas follow; folded,
    the text is the message's, once."""
    enc = ai_sdk.UiMessageStream("s1", RUN)
    out = feed(
        enc,
        [
            (p.K_ASSISTANT_DELTA, {"text": "héllo "}),
            (p.K_ASSISTANT_DELTA, {"text": "wörld"}),
            (p.K_RUN_RESUMED, {"reason": "takeover", "keep": 3}),
            (p.K_ASSISTANT_DELTA, {"text": "lo wörld!"}),
            (p.K_ASSISTANT_MESSAGE, {"text": "héllo wörld!"}),
            (p.K_RUN_FINISHED, {"stop_reason": p.STOP_END_TURN}),
        ],
    )
    kinds = [c["type"] for c in out]
    assert kinds.count("reset-step") == 1
    reset = kinds.index("reset-step")
    assert out[reset + 1 : reset + 3] == [
        {"type": "text-start", "id": f"{RUN}:1"},
        {"type": "text-delta", "id": f"{RUN}:1", "delta": "hél"},
    ]
    parts = requests.fold(out)
    assert [p_["text"] for p_ in parts if p_["type"] == "text"] == ["héllo wörld!"]
    assert out[-1] == {
        "type": "finish",
        "finishReason": "stop",
        "messageMetadata": {"first_seq": 10, "last_seq": 15},
    }
    assert enc.done


def test_a_gate_not_decided_ends_the_response_and_one_decided_goes_on():
    """A replay that finds the gate decided goes on through it; a gate still
    open when the replay catches up ends the response at the approval request."""
    gate = {"approval_id": "ap_1", "tool_call_id": "c1", "tool": "write_file", "args": {"a": 1}}
    events = [
        (p.K_TOOL_CALL, {"tool_call_id": "c1", "tool": "write_file", "args": {"a": 1}}),
        (p.K_APPROVAL_REQUESTED, gate),
        (p.K_RUN_PAUSED, {"stop_reason": p.STOP_REQUIRES_APPROVAL, "approval_id": "ap_1"}),
    ]
    open_gate = ai_sdk.UiMessageStream("s1", RUN)
    out = feed(open_gate, events)
    assert open_gate.done and out[-1]["finishReason"] == "tool-calls"
    assert [c["type"] for c in out].count("tool-input-available") == 1
    decided = ai_sdk.UiMessageStream("s1", RUN)
    out = feed(
        decided,
        [
            *events,
            (p.K_APPROVAL_DECIDED, {"approval_id": "ap_1", "decision": p.DENY}),
            (p.K_TOOL_RESULT, {"tool_call_id": "c1", "ok": False, "output": "denied"}),
        ],
    )
    assert not decided.done
    (tool,) = [part for part in requests.fold(out) if part["type"] == "tool-write_file"]
    assert tool["state"] == "output-denied" and tool["approval"] == {
        "id": "ap_1",
        "approved": False,
    }


@pytest.mark.parametrize(
    ("decision", "result", "state"),
    [
        (p.EDIT, {"ok": True, "output": "appended"}, "output-available"),
        (p.RESPOND, {"ok": True, "output": "already there"}, "output-available"),
        (p.ANSWER, {"ok": True, "output": "accepted"}, "output-available"),
        (p.DENY, {"ok": False, "output": "denied: no"}, "output-denied"),
        (p.GATE_EXPIRED, {"ok": False, "output": "expired: nobody decided"}, "output-denied"),
    ],
)
def test_an_edit_or_a_response_is_not_a_denial(decision, result, state):
    """An edited call ran, a response or a form's answer answered it: the
    chat shows their output, approved; a denial and an expiry did not run it."""
    gate = {"approval_id": "ap_1", "tool_call_id": "c1", "tool": "write_file", "args": {"a": 1}}
    out = feed(
        ai_sdk.UiMessageStream("s1", RUN),
        [
            (p.K_TOOL_CALL, {"tool_call_id": "c1", "tool": "write_file", "args": {"a": 1}}),
            (p.K_APPROVAL_REQUESTED, gate),
            (p.K_RUN_PAUSED, {"stop_reason": p.STOP_REQUIRES_APPROVAL, "approval_id": "ap_1"}),
            (p.K_APPROVAL_DECIDED, {"approval_id": "ap_1", "decision": decision}),
            (p.K_TOOL_RESULT, {"tool_call_id": "c1", **result}),
        ],
    )
    (tool,) = [part for part in requests.fold(out) if part["type"] == "tool-write_file"]
    assert tool["state"] == state
    assert tool["approval"]["approved"] is (decision in (p.EDIT, p.RESPOND, p.ANSWER))


def test_other_runs_and_the_users_own_input_are_not_this_message():
    """Only the run's own events are encoded."""
    enc = ai_sdk.UiMessageStream("s1", RUN)
    out = feed(
        enc,
        [
            (p.K_USER_MESSAGE, {"text": "hi", "client_message_id": "m"}),
            (p.K_ASSISTANT_DELTA, {"text": "other"}, "run_2"),
            (p.K_ASSISTANT_MESSAGE, {"text": "mine"}),
        ],
    )
    assert [c["type"] for c in out] == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
    ]


def test_an_error_is_an_error_chunk_then_finish():
    """A failed run says its message in an ``error`` chunk before ``finish``."""
    out = feed(
        ai_sdk.UiMessageStream("s1", RUN),
        [(p.K_RUN_FINISHED, {"stop_reason": p.STOP_ERROR, "message": "boom"})],
    )
    assert out[-3:-1] == [{"type": "error", "errorText": "boom"}, {"type": "finish-step"}]
    assert out[-1]["finishReason"] == "error"


def user(text="hi", mid="m1"):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def test_a_request_is_read_from_its_last_message_only():
    """Only the last message counts: a user message (its id, its text parts),
    or the assistant's approval responses."""
    asked = requests.parse_chat({"id": "c1", "messages": [user("old", "m0"), user("new")]})
    assert asked.user == ("m1", "new") and asked.trigger == requests.SUBMIT
    responded = {
        "id": "a",
        "role": "assistant",
        "parts": [
            {
                "type": "tool-x",
                "state": "approval-responded",
                "approval": {"id": "ap", "approved": True},
            }
        ],
    }
    assert requests.parse_chat({"id": "c1", "messages": [user(), responded]}).answers == (
        ("ap", {"decision": "approve"}),
    )
    responded["parts"][0]["approval"] = {"id": "ap", "approved": False, "reason": "no"}
    assert requests.parse_chat({"id": "c1", "messages": [user(), responded]}).answers == (
        ("ap", {"decision": "deny", "reason": "no"}),
    )
    regen = requests.parse_chat({"id": "c1", "trigger": "regenerate-message", "messageId": "run_1"})
    assert regen.message_id == "run_1" and regen.user is None


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"id": "../x", "messages": [user()]},
        {"id": "c1", "messages": []},
        {"id": "c1", "messages": [user()], "trigger": "resume-stream"},
        {"id": "c1", "messages": [{"id": "a", "role": "assistant", "parts": []}]},
        {"id": "c1", "messages": [{"role": "system", "parts": []}]},
        {"id": "c1", "messages": [{"id": 3, "role": "user", "parts": []}]},
    ],
)
def test_a_bad_request_is_a_bad_frame(body):
    """Every malformed body is refused with ``bad_frame``, never half-read."""
    with pytest.raises(p.FrameError) as refused:
        requests.parse_chat(body)
    assert refused.value.code == p.E_BAD_FRAME


def test_two_takeovers_after_a_closed_text_keep_it_whole():
    """A closed text then an open one in one step, and two run.resumed: each
    reset says the closed text again whole (the step keeps it), and the
    folded message is the logged one."""
    enc = ai_sdk.UiMessageStream("s1", RUN)
    out = feed(
        enc,
        [
            (p.K_ASSISTANT_DELTA, {"text": "first"}),
            (p.K_ASSISTANT_MESSAGE, {"text": "first"}),
            (p.K_ASSISTANT_DELTA, {"text": "second one"}),
            (p.K_RUN_RESUMED, {"reason": "takeover", "keep": 6}),
            (p.K_ASSISTANT_DELTA, {"text": " tw"}),
            (p.K_RUN_RESUMED, {"reason": "takeover", "keep": 7}),
            (p.K_ASSISTANT_DELTA, {"text": "two"}),
            (p.K_ASSISTANT_MESSAGE, {"text": "second two"}),
        ],
    )
    assert [c["type"] for c in out].count("reset-step") == 2
    parts = requests.fold(out)
    assert [part["text"] for part in parts if part["type"] == "text"] == ["first", "second two"]


def test_a_lone_surrogate_a_model_streamed_is_escaped_not_a_crash():
    """A chunk that cannot be UTF-8 (a lone surrogate) is written escaped."""
    raw = ai_sdk.chunk_bytes({"type": "text-delta", "id": "x", "delta": "a\ud800b"})
    assert json.loads(raw.decode()[6:]) == {"type": "text-delta", "id": "x", "delta": "a\ud800b"}
