"""The Anthropic Messages agent against a fake streaming endpoint."""

from __future__ import annotations

import pytest

from sessions_app.runtime.agents import anthropic as anthropic_agent
from sessions_app.runtime.agents import get_agent
from sessions_app.runtime.agents.anthropic import AnthropicAgent
from sessions_app.runtime.base import AgentError, Parked, ToolOutcome
from tests.fakes import (
    FakeAnthropicServer,
    FakeContext,
    FakeResponse,
    _sse,
    anthropic_response,
    error_response,
)

API_KEY = "sk-ant-test-very-secret"


@pytest.fixture
def server(settings):
    with FakeAnthropicServer() as fake:
        settings.ANTHROPIC_BASE_URL = fake.base_url
        settings.ANTHROPIC_API_KEY = API_KEY
        settings.ANTHROPIC_MODEL = "fake-claude"
        settings.ANTHROPIC_MAX_TOKENS = 1000
        yield fake


def start(ctx: FakeContext) -> FakeContext:
    AnthropicAgent().start(ctx)
    return ctx


def park(ctx: FakeContext) -> FakeContext:
    with pytest.raises(Parked):
        AnthropicAgent().start(ctx)
    return ctx


def resume(ctx: FakeContext, parks: bool = False, **outcome) -> FakeContext:
    """Resumes on a fresh context with only the saved state, as another process would."""
    later = FakeContext(ctx.text, state=ctx.state)
    if parks:
        with pytest.raises(Parked):
            AnthropicAgent().resume(later, ctx.outcome(**outcome))
    else:
        AnthropicAgent().resume(later, ctx.outcome(**outcome))
    return later


def test_it_is_a_builtin_agent():
    """AGENT_CLASS = "anthropic" names it."""
    assert isinstance(get_agent("anthropic"), AnthropicAgent)


def test_text_streams_as_coalesced_deltas_and_one_message(server):
    """Many text deltas become a few run deltas with the exact text, then the message."""
    fragments = [f"w{i} " for i in range(300)]
    server.responses = [anthropic_response(fragments)]
    ctx = start(FakeContext("hi"))
    assert "".join(ctx.deltas) == "".join(fragments)
    assert 1 <= len(ctx.deltas) < 30
    assert ctx.messages == ["".join(fragments)]


def test_a_buffered_fragment_is_flushed_while_the_model_is_silent(server):
    """A fragment goes out within the coalescing window even if nothing follows yet."""
    ctx = FakeContext("hi")
    server.responses = [anthropic_response(["Hello", ctx.delta_seen, " world"])]
    start(ctx)
    assert ctx.deltas == ["Hello", " world"]


def test_the_request_is_a_messages_call_with_tools_history_and_the_key(server):
    """One streaming POST to /v1/messages: model, max_tokens, system, the
    history as alternating turns, both tools with input schemas, the key and
    the API version as headers."""
    server.responses = [anthropic_response("ok")]
    history = [
        {"role": "user", "content": "before"},
        {"role": "user", "content": "and again"},
        {"role": "assistant", "content": "reply"},
    ]
    start(FakeContext("now", history=history))
    body = server.requests[0]
    headers = {name.lower(): value for name, value in server.headers[0].items()}
    assert body["model"] == "fake-claude" and body["max_tokens"] == 1000
    assert body["stream"] is True and "workspace" in body["system"]
    assert body["messages"] == [
        {"role": "user", "content": "before\n\nand again"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "now"},
    ]
    assert [t["name"] for t in body["tools"]] == ["write_file", "terminal", "ask_user"]
    assert body["tools"][0]["input_schema"]["required"] == ["path", "text"]
    assert headers["x-api-key"] == API_KEY
    assert headers["anthropic-version"] == anthropic_agent.API_VERSION
    assert "authorization" not in headers


def test_a_tool_use_parks_and_its_result_goes_back_as_a_tool_result(server):
    """The model's tool_use parks with its input; on resume the assistant turn
    (text and tool_use) and a user turn with the tool_result under the model's
    own id go back, and the model's final text finishes the run."""
    server.responses = [
        anthropic_response(
            "Let me write.",
            ("tool_use", "toolu_abc", "write_file", ['{"path": "no', 'tes.txt", "text": "hi"}']),
            stop="tool_use",
        ),
        anthropic_response(["Done", ", wrote it."]),
    ]
    ctx = park(FakeContext("write hi to notes.txt"))
    assert [(t, a) for t, a, _ in ctx.tool_requests] == [
        ("write_file", {"path": "notes.txt", "text": "hi"})
    ]
    assert "".join(ctx.deltas) == "Let me write." and ctx.messages == []

    later = resume(ctx, output="appended 3 bytes to notes.txt")
    assert later.messages == ["Done, wrote it."]
    sent = server.requests[1]["messages"]
    assert sent[-2] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me write."},
            {
                "type": "tool_use",
                "id": "toolu_abc",
                "name": "write_file",
                "input": {"path": "notes.txt", "text": "hi"},
            },
        ],
    }
    assert sent[-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_abc",
                "content": "appended 3 bytes to notes.txt",
                "is_error": False,
            }
        ],
    }


def test_two_tool_uses_are_one_step_and_one_user_turn_of_results(server):
    """Two calls in one turn open their gates together; both results (one
    denied, with its reason) go back together in one user message, in order."""
    server.responses = [
        anthropic_response(
            ("tool_use", "toolu_1", "terminal", ['{"command": "ls"}']),
            ("tool_use", "toolu_2", "write_file", ['{"path": "a.txt", "text": "x"}']),
            stop="tool_use",
        ),
        anthropic_response("All done."),
    ]
    first = park(FakeContext("look and write"))
    assert [[tool for tool, _ in step] for step in first.steps] == [["terminal", "write_file"]]
    assert len(server.requests) == 1
    last = FakeContext(first.text, state=first.state)
    outcomes = first.step_outcomes({"output": "a.txt"}, {"approved": False, "output": "denied: no"})
    AnthropicAgent().resume_all(last, outcomes)
    assert last.messages == ["All done."]
    results = server.requests[1]["messages"][-1]
    assert results["role"] == "user"
    assert [(r["tool_use_id"], r["content"], r["is_error"]) for r in results["content"]] == [
        ("toolu_1", "a.txt", False),
        ("toolu_2", "denied: no", True),
    ]


@pytest.mark.parametrize(
    ("name", "fragments", "error"),
    [
        ("rm_rf", ["{}"], "unknown tool"),
        ("write_file", ['{"path": '], "not valid JSON"),
        ("write_file", ['{"path": "a.txt", "text": Infinity}'], "not valid JSON"),
        ("write_file", ['{"path": "a.txt"}'], "error:"),
    ],
)
def test_a_malformed_tool_use_is_answered_without_a_gate(server, name, fragments, error):
    """An unknown tool or bad input never reaches the user: the model gets an
    error tool_result and goes on."""
    server.responses = [
        anthropic_response(("tool_use", "toolu_x", name, fragments), stop="tool_use"),
        anthropic_response("Sorry."),
    ]
    ctx = start(FakeContext("do it"))
    assert ctx.tool_requests == [] and ctx.messages == ["Sorry."]
    (result,) = server.requests[1]["messages"][-1]["content"]
    assert result["is_error"] is True and error in result["content"]


def test_an_error_event_or_status_ends_the_run_without_the_key(server):
    """An error event mid-stream and an HTTP error both finish with a message
    that says what happened and never carries the API key."""
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    server.responses = [
        FakeResponse(items=[_sse({"type": "message_start", "message": {}}), _sse(overloaded)]),
        error_response(401, f"invalid x-api-key {API_KEY}"),
    ]
    with pytest.raises(AgentError, match="reported an error: busy"):
        start(FakeContext("hi"))
    with pytest.raises(AgentError, match="HTTP 401") as raised:
        start(FakeContext("hi"))
    assert API_KEY not in str(raised.value) and "[redacted]" in str(raised.value)


def test_a_state_from_elsewhere_is_refused(server):
    """A resume with a state this agent did not save ends the run with an error."""
    ctx = FakeContext("x", state={"messages": "nope"})
    with pytest.raises(AgentError, match="unusable"):
        AnthropicAgent().resume(ctx, ToolOutcome("tc_1", "terminal", {}, True, True, ""))


def test_an_answer_cut_off_at_max_tokens_ends_with_an_error(server):
    """stop_reason max_tokens finishes the run with an error that says so (the
    text streamed so far stays), never as a whole answer or a retried tool."""
    server.responses = [anthropic_response(["A long answer that"], stop="max_tokens")]
    ctx = FakeContext("hi")
    with pytest.raises(AgentError, match="cut off at ANTHROPIC_MAX_TOKENS"):
        AnthropicAgent().start(ctx)
    assert ctx.deltas == ["A long answer that"] and ctx.messages == []
    assert len(server.requests) == 1


def test_whitespace_text_and_a_leading_answer_are_not_sent(server):
    """A whitespace-only text before a tool use is not sent back as a text
    block, and the history sent starts with the user."""
    server.responses = [
        anthropic_response(
            "\n\n", ("tool_use", "toolu_1", "terminal", ['{"command": "ls"}']), stop="tool_use"
        ),
        anthropic_response("ok"),
    ]
    history = [{"role": "assistant", "content": "an answer"}, {"role": "user", "content": "q"}]
    ctx = park(FakeContext("list", history=history))
    assert server.requests[0]["messages"][0] == {"role": "user", "content": "q\n\nlist"}
    resume(ctx, output="a.txt")
    assistant = server.requests[1]["messages"][-2]
    assert [block["type"] for block in assistant["content"]] == ["tool_use"]


def test_the_system_prompt_is_a_setting(server, settings):
    """AGENT_SYSTEM_PROMPT is the request's system prompt."""
    settings.AGENT_SYSTEM_PROMPT = "Answer in one line."
    server.responses = [anthropic_response("ok")]
    start(FakeContext("now"))
    assert server.requests[0]["system"] == "Answer in one line."


def test_a_takeover_after_a_model_call_makes_its_calls_without_asking_again(server):
    """The model step is checkpointed (the loop both backends share): a run
    taken over after the model asked for a tool goes on with that call."""
    server.responses = [
        anthropic_response(("tool_use", "toolu_1", "terminal", ['{"command": "ls"}']))
    ]
    ctx = park(FakeContext("list"))
    asked = len(server.requests)
    later = park(FakeContext("list", state=ctx.checkpoints[0]))
    assert len(server.requests) == asked
    assert later.tool_requests[0][:2] == ("terminal", {"command": "ls"})
