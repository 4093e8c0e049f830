"""The tool registry (sessions_app/runtime/registry.py): tools come from
``AGENT_TOOLS``; a third one is added by a test, without editing the app."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from sessions_app.runtime import registry
from sessions_app.runtime.agents import anthropic, openai
from sessions_app.runtime.tools import workspace_for
from tests.harness import WsClient
from tests.support.sessions import send_text

BUILTIN = ["sessions_app.runtime.tools.WriteFile", "sessions_app.runtime.tools.Terminal"]
WITH_SHOUT = [*BUILTIN, "tests.fakes.Shout"]


def test_the_built_in_tools_are_entries_like_any_other(settings):
    """By default: write_file and terminal, each with its schema and display."""
    settings.AGENT_TOOLS = BUILTIN
    assert registry.names() == ("write_file", "terminal")
    assert registry.display_of("terminal") == [{"arg": "command", "as": "command"}]
    assert [t["function"]["name"] for t in openai.tool_schemas()] == ["write_file", "terminal"]


def test_a_third_tool_reaches_every_backend_and_is_validated(settings):
    """A tool named in AGENT_TOOLS is offered to both model backends with its
    own schema, its arguments are checked against it, and it executes."""
    settings.AGENT_TOOLS = WITH_SHOUT
    assert registry.names() == ("write_file", "terminal", "shout")
    shout = next(t for t in anthropic.tool_schemas() if t["name"] == "shout")
    assert shout["input_schema"]["required"] == ["text"]
    assert openai.tool_schemas()[-1]["function"]["description"] == "Say TEXT in capitals."
    assert registry.validate_args("shout", {"text": "hi"}) is None
    for bad, why in (
        ({}, "needs the argument 'text'"),
        ({"text": 5}, "'text' must be a string"),
        ({"text": "a", "times": True}, "'times' must be a integer"),
        ({"text": "a", "loud": 1}, "unexpected arguments for shout: loud"),
        ([], "arguments must be an object"),
    ):
        assert why in registry.validate_args("shout", bad), bad
    assert registry.validate_args("nope", {}) == "unknown tool: 'nope'"
    workspace = workspace_for("s_registry")
    assert registry.execute("shout", {"text": "hi", "times": 2}, workspace) == (True, "HIHI")
    settings.AGENT_TOOLS = BUILTIN
    assert registry.validate_args("shout", {"text": "hi"}) == "unknown tool: 'shout'"


@pytest.mark.parametrize(
    ("tools", "problem"),
    [
        (["tests.fakes.Nope"], "cannot load"),
        (["tests.fakes.FakeContext"], "is not a named Tool subclass"),
        ([*BUILTIN, "sessions_app.runtime.tools.WriteFile"], "two tools are named"),
    ],
)
def test_a_bad_entry_is_a_clear_configuration_error(settings, tools, problem):
    """A path that does not load, a class that is not a Tool, or two tools of
    one name: ImproperlyConfigured, saying which."""
    settings.AGENT_TOOLS = tools
    with pytest.raises(ImproperlyConfigured, match=problem):
        registry.tools()


@pytest.mark.django_db(transaction=True)
async def test_the_third_tool_runs_through_a_gate_once(own_server, cookie):
    """On a server started with the third tool in AGENT_TOOLS, the demo
    agent's /tool asks for it: the gate carries the tool's display, the
    approval runs it once, and the answer is its output. An unknown tool
    never gets a gate."""
    start, _ = own_server
    server = start(AGENT_TOOLS=",".join(WITH_SHOUT))
    c = await WsClient.connect(server.ws, cookie)
    sid = (await c.start())["session_id"]
    sent = await send_text(c, '/tool shout {"text": "hello"}', "m1")
    asked = await c.wait_event(lambda f: f["kind"] == "approval.requested")
    assert asked["data"]["display"] == [{"arg": "text", "label": "what", "as": "code"}]
    decided = await c.request(
        {"type": "decide", "approval_id": asked["data"]["approval_id"], "decision": "approve"}
    )
    assert decided["type"] == "decide_ok"
    end = await c.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == sent["run_id"]
    )
    assert end["data"]["stop_reason"] == "end_turn"
    result = next(e for e in c.events() if e["kind"] == "tool.result")
    assert (result["data"]["ok"], result["data"]["output"]) == (True, "HELLO")
    message = [e for e in c.events() if e["kind"] == "assistant.message"][-1]
    assert message["data"]["text"] == "shout: HELLO"
    assert (workspace_for(sid) / "shouts.txt").read_text() == "HELLO\n"
    unknown = await send_text(c, "/tool nope {}", "m2")
    failed = await c.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == unknown["run_id"]
    )
    assert failed["data"] == {"stop_reason": "error", "message": "unknown tool: 'nope'"}
    assert not [e for e in c.events() if e["kind"] == "approval.requested"][1:]
    await c.close()
