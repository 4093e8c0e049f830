"""The OpenAI-compatible agent against a fake streaming endpoint."""

from __future__ import annotations

import json
import socket

import pytest

from sessions_app.runtime.agents import openai as openai_agent
from sessions_app.runtime.agents.openai import OpenAIAgent
from sessions_app.runtime.base import AgentError, Parked
from tests.fakes import (
    FakeContext,
    FakeOpenAIServer,
    FakeResponse,
    error_response,
    text_response,
    tool_call_response,
)

API_KEY = "sk-test-very-secret"


@pytest.fixture
def server(settings):
    with FakeOpenAIServer() as fake:
        settings.OPENAI_BASE_URL = fake.base_url
        settings.OPENAI_API_KEY = API_KEY
        settings.OPENAI_MODEL = "fake-model"
        yield fake


def start(ctx: FakeContext) -> FakeContext:
    OpenAIAgent().start(ctx)
    return ctx


def park(ctx: FakeContext) -> FakeContext:
    with pytest.raises(Parked):
        OpenAIAgent().start(ctx)
    return ctx


def resume(ctx: FakeContext, **outcome) -> FakeContext:
    """Resumes on a fresh context with only the saved state, as another process would."""
    later = FakeContext(ctx.text, state=ctx.state)
    OpenAIAgent().resume(later, ctx.outcome(**outcome))
    return later


def resume_to_park(ctx: FakeContext, **outcome) -> FakeContext:
    """Like resume, for a resume that parks at the next gate."""
    later = FakeContext(ctx.text, state=ctx.state)
    with pytest.raises(Parked):
        OpenAIAgent().resume(later, ctx.outcome(**outcome))
    return later


def test_fast_fragments_are_coalesced_into_few_deltas(server):
    """Many tiny chunks sent at once become a few deltas with the exact text."""
    fragments = [f"w{i} " for i in range(300)]
    server.responses = [text_response(*fragments)]
    ctx = start(FakeContext("hi"))
    assert "".join(ctx.deltas) == "".join(fragments)
    assert 1 <= len(ctx.deltas) < 30
    assert ctx.messages == ["".join(fragments)]
    assert ctx.tool_requests == []


def test_a_buffered_fragment_is_flushed_while_the_model_is_silent(server):
    """A fragment goes out within the coalescing window even if nothing follows yet."""
    ctx = FakeContext("hi")
    # The server sends "Hello", then waits until the agent has emitted a delta.
    server.responses = [text_response("Hello", ctx.delta_seen, " world")]
    start(ctx)
    assert ctx.deltas == ["Hello", " world"]
    assert ctx.messages == ["Hello world"]


def test_the_request_carries_model_tools_history_and_the_key(server):
    """One streaming POST: model, system prompt, history, user text, both tools, bearer key."""
    server.responses = [text_response("ok")]
    history = [{"role": "user", "content": "before"}, {"role": "assistant", "content": "reply"}]
    start(FakeContext("now", history=history))
    body = server.requests[0]
    assert body["model"] == "fake-model"
    assert body["stream"] is True
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][1:] == [*history, {"role": "user", "content": "now"}]
    assert [tool["function"]["name"] for tool in body["tools"]] == [
        "write_file",
        "terminal",
        "ask_user",
    ]
    assert server.headers[0]["Authorization"] == f"Bearer {API_KEY}"


def test_a_tool_call_parks_and_resume_sends_the_result_back(server):
    """The model's call parks with its args; on resume the tool message goes back
    under the model's own id and the model's final text finishes the run."""
    arguments = json.dumps({"path": "notes.txt", "text": "hello world"})
    server.responses = [
        tool_call_response(("call_abc", "write_file", arguments), text="Let me write."),
        text_response("Done", ", wrote it."),
    ]
    ctx = park(FakeContext("write hello world to notes.txt"))
    assert [(tool, args) for tool, args, _ in ctx.tool_requests] == [
        ("write_file", {"path": "notes.txt", "text": "hello world"})
    ]
    assert "".join(ctx.deltas) == "Let me write."
    assert ctx.messages == []
    assert len(server.requests) == 1

    later = resume(ctx, output="appended 12 bytes to notes.txt")
    assert later.messages == ["Done, wrote it."]
    assert "".join(later.deltas) == "Done, wrote it."
    sent = server.requests[1]["messages"]
    assert sent[-2]["role"] == "assistant"
    assert sent[-2]["tool_calls"] == [
        {
            "id": "call_abc",
            "type": "function",
            "function": {"name": "write_file", "arguments": arguments},
        }
    ]
    assert sent[-1] == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": "appended 12 bytes to notes.txt",
    }


def test_a_denied_call_is_answered_denied(server):
    """A denied call reaches the model as the tool message 'denied'."""
    server.responses = [
        tool_call_response(("call_1", "terminal", '{"command": "ls"}')),
        text_response("Understood."),
    ]
    ctx = park(FakeContext("list files"))
    later = resume(ctx, approved=False)
    assert later.messages == ["Understood."]
    assert server.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "denied",
    }


def test_several_calls_in_one_answer_open_their_gates_together(server):
    """The calls of one answer are one step: asked at once, and once all are
    decided the model sees every result, in its order (a denial with its
    reason)."""
    server.responses = [
        tool_call_response(
            ("call_1", "terminal", '{"command": "ls"}'),
            ("call_2", "terminal", '{"command": "pwd"}'),
            ("call_3", "write_file", '{"path": "a", "text": "b"}'),
        ),
        text_response("All three answered."),
    ]
    first = park(FakeContext("look around"))
    assert first.tool_requests == []
    assert first.steps == [
        [
            ("terminal", {"command": "ls"}),
            ("terminal", {"command": "pwd"}),
            ("write_file", {"path": "a", "text": "b"}),
        ]
    ]
    assert len(server.requests) == 1
    later = FakeContext(first.text, state=first.state)
    outcomes = first.step_outcomes(
        {"output": "notes.txt\n"},
        {"output": "/ws\n"},
        {"approved": False, "output": "denied: not there"},
    )
    OpenAIAgent().resume_all(later, outcomes)
    assert later.messages == ["All three answered."]
    tool_messages = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_1", "notes.txt\n"),
        ("call_2", "/ws\n"),
        ("call_3", "denied: not there"),
    ]


def test_a_bad_call_beside_good_ones_is_answered_and_the_others_gated_together(server):
    """A malformed call in a step is answered as a failure; the rest are one step."""
    server.responses = [
        tool_call_response(
            ("call_1", "terminal", '{"command": "ls"}'),
            ("call_bad", "rm", "{}"),
            ("call_2", "terminal", '{"command": "pwd"}'),
        ),
        text_response("Done."),
    ]
    first = park(FakeContext("go"))
    assert first.steps == [[("terminal", {"command": "ls"}), ("terminal", {"command": "pwd"})]]
    later = FakeContext(first.text, state=first.state)
    OpenAIAgent().resume_all(later, first.step_outcomes({"output": "x"}, {"output": "y"}))
    tool_messages = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_bad", "call_1", "call_2"]


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("write_file", '{"path": "x", ', "not valid JSON"),
        ("write_file", '{"path": "x", "text": "y", "n": NaN}', "NaN is not a JSON number"),
        ("write_file", '{"path": "x"}', "text"),
        ("rm", '{"path": "x"}', "unknown tool"),
    ],
)
def test_a_malformed_call_is_answered_as_a_failure_without_a_gate(server, name, arguments, error):
    """Bad JSON, bad args or an unknown tool: no approval, the model gets the error."""
    server.responses = [
        tool_call_response(("call_bad", name, arguments)),
        text_response("Sorry."),
    ]
    ctx = start(FakeContext("do it"))
    assert ctx.tool_requests == []
    assert ctx.messages == ["Sorry."]
    reply = server.requests[1]["messages"][-1]
    assert reply["role"] == "tool" and reply["tool_call_id"] == "call_bad"
    assert reply["content"].startswith("error:") and error in reply["content"]


def test_a_model_that_never_stops_calling_tools_is_stopped(server):
    """After the cap on model calls the run ends with an error."""
    server.responses = [
        tool_call_response((f"call_{i}", "nope", "{}")) for i in range(openai_agent.MAX_MODEL_CALLS)
    ]
    with pytest.raises(AgentError, match="still calling tools"):
        start(FakeContext("loop"))
    assert len(server.requests) == openai_agent.MAX_MODEL_CALLS


def test_http_500_is_an_agent_error(server):
    """An HTTP error ends the run with the status and the endpoint's message."""
    server.responses = [error_response(500, "the model is on fire")]
    ctx = FakeContext("hi")
    with pytest.raises(AgentError, match="HTTP 500: the model is on fire"):
        start(ctx)
    assert ctx.calls == []


def test_errors_never_show_the_api_key(server):
    """An endpoint echoing the key back does not put it in the run's error."""
    server.responses = [error_response(401, f"Incorrect API key provided: {API_KEY}")]
    with pytest.raises(AgentError) as caught:
        start(FakeContext("hi"))
    assert "HTTP 401" in str(caught.value)
    assert API_KEY not in str(caught.value)


def test_an_error_chunk_in_the_stream_is_an_agent_error(server):
    """An error object inside the stream ends the run with its message."""
    server.responses = [FakeResponse(items=[{"error": {"message": "overloaded"}}])]
    with pytest.raises(AgentError, match="overloaded"):
        start(FakeContext("hi"))


def test_an_unreachable_endpoint_is_an_agent_error(settings):
    """A refused connection ends the run with a clear error."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(AgentError, match="could not reach the model endpoint"):
        start(FakeContext("hi"))


def test_a_silent_endpoint_times_out(server, monkeypatch):
    """No answer within the timeout ends the run with an error."""
    monkeypatch.setattr(openai_agent, "REQUEST_TIMEOUT", 0.2)
    server.responses = [FakeResponse(hold=server.release, items=text_response("late").items)]
    with pytest.raises(AgentError, match="did not answer within"):
        start(FakeContext("hi"))


def test_a_stream_that_stalls_times_out(server, monkeypatch):
    """A stream going silent past the timeout ends the run; sent text was streamed."""
    monkeypatch.setattr(openai_agent, "REQUEST_TIMEOUT", 0.2)
    server.responses = [text_response("Hel", server.release, "lo")]
    ctx = FakeContext("hi")
    with pytest.raises(AgentError, match="did not answer within"):
        start(ctx)
    assert ctx.deltas == ["Hel"]
    assert ctx.messages == []


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_with_the_key(server, status):
    """An endpoint answering with a redirect (to another host here) ends the
    run with an error; the request, and its key, never reach the target."""
    with FakeOpenAIServer() as elsewhere:
        server.responses = [
            FakeResponse(status=status, location=elsewhere.base_url + "/chat/completions")
        ]
        with pytest.raises(AgentError, match=f"HTTP {status}"):
            start(FakeContext("hi"))
        assert elsewhere.requests == [] and elsewhere.headers == []


def test_the_system_prompt_is_a_setting(server, settings):
    """AGENT_SYSTEM_PROMPT is what the model is told first."""
    settings.AGENT_SYSTEM_PROMPT = "Answer in one line."
    server.responses = [text_response("ok")]
    start(FakeContext("now"))
    assert server.requests[0]["messages"][0] == {"role": "system", "content": "Answer in one line."}


def test_a_takeover_after_a_model_call_makes_its_calls_without_asking_again(server):
    """The model step is checkpointed: a run taken over after the model asked
    for a tool goes on with that call; the model is not asked again."""
    server.responses = [tool_call_response(("call_a", "terminal", '{"command": "ls"}'))]
    ctx = park(FakeContext("list"))
    saved = ctx.checkpoints[0]
    assert [c["name"] for c in saved["pending"]] == ["terminal"] and "current" not in saved
    asked = len(server.requests)
    later = park(FakeContext("list", state=saved))
    assert len(server.requests) == asked
    assert later.tool_requests[0][:2] == ("terminal", {"command": "ls"})


def test_a_takeover_after_the_answer_says_nothing_again(server):
    """The final answer marks the state done before its message: started again
    from that checkpoint, the agent neither calls the model nor speaks."""
    server.responses = [text_response("all done")]
    ctx = start(FakeContext("hi"))
    asked = len(server.requests)
    again = start(FakeContext("hi", state=ctx.checkpoints[-1]))
    assert (again.messages, again.deltas, len(server.requests)) == ([], [], asked)
