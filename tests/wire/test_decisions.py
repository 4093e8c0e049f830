"""A decision's fields (sessions_app/wire/decisions.py): one rule for the
``decide`` frame and the REST API's body."""

from __future__ import annotations

import pytest

from sessions_app.wire import protocol as p
from sessions_app.wire.decisions import fields_of, parse_decide


def test_each_decision_carries_what_it_needs():
    """approve alone; deny with an optional reason (trimmed); edit with its
    args; respond with its text; answer with its fields; all with approve or
    deny."""
    assert fields_of({"decision": "approve"}) == {
        "decision": "approve",
        "reason": "",
        "whole_step": False,
        "args": None,
        "response": "",
        "answer": None,
    }
    assert fields_of({"decision": "answer", "answer": {"n": 1}})["answer"] == {"n": 1}
    assert fields_of({"decision": "deny", "reason": "  no  ", "all": True})["reason"] == "no"
    assert fields_of({"decision": "edit", "args": {"path": "b"}})["args"] == {"path": "b"}
    assert fields_of({"decision": "respond", "response": "done"})["response"] == "done"
    d = parse_decide({"approval_id": "a", "decision": "deny", "reason": "why", "all": True})
    assert (d.approval_id, d.decision, d.reason, d.whole_step) == ("a", "deny", "why", True)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"decision": "maybe"}, "'decision' must be"),
        ({"decision": "approve", "reason": "fine"}, "with a denial only"),
        ({"decision": "deny", "reason": 7}, "'reason' must be a string"),
        ({"decision": "deny", "reason": "x" * (p.MAX_REASON_CHARS + 1)}, "at most"),
        ({"decision": "deny", "reason": "\ud800"}, "not valid Unicode"),
        ({"decision": "edit"}, "only an edit, carries 'args'"),
        ({"decision": "edit", "args": [1]}, "only an edit, carries 'args'"),
        ({"decision": "edit", "args": {"a": {"b": ["x\u0000"]}}}, "not valid Unicode"),
        ({"decision": "edit", "args": {"\ud800": 1}}, "not valid Unicode"),
        ({"decision": "approve", "args": {}}, "only an edit, carries 'args'"),
        ({"decision": "respond"}, "only a response, carries 'response'"),
        ({"decision": "respond", "response": "   "}, "only a response, carries 'response'"),
        ({"decision": "approve", "response": "x"}, "only a response, carries 'response'"),
        ({"decision": "respond", "response": "x" * (p.MAX_RESPONSE_CHARS + 1)}, "at most"),
        ({"decision": "deny", "all": "yes"}, "'all' must be a boolean"),
        ({"decision": "deny", "all": 1}, "'all' must be a boolean"),
        ({"decision": "edit", "args": {}, "all": True}, "never 'all'"),
        ({"decision": "answer"}, "only an answer, carries 'answer'"),
        ({"decision": "answer", "answer": "Ada"}, "only an answer, carries 'answer'"),
        ({"decision": "approve", "answer": {}}, "only an answer, carries 'answer'"),
        ({"decision": "answer", "answer": {"n": "\ud800"}}, "not valid Unicode"),
        ({"decision": "answer", "answer": {}, "all": True}, "never 'all'"),
    ],
)
def test_a_bad_decision_says_what_is_wrong(fields, says):
    """Each refusal is a bad_frame naming the field."""
    with pytest.raises(p.FrameError, match=says) as refused:
        fields_of(fields)
    assert refused.value.code == p.E_BAD_FRAME
