"""The scripted demo agent answers the commands of docs/protocol.md exactly."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from sessions_app.runtime.agents import get_agent
from sessions_app.runtime.agents.openai import OpenAIAgent
from sessions_app.runtime.agents.scripted import ScriptedAgent
from sessions_app.runtime.base import AgentError, Parked
from sessions_app.runtime.registry import execute
from sessions_app.runtime.tools import workspace_for
from tests.fakes import FakeContext


def run(text: str) -> FakeContext:
    ctx = FakeContext(text)
    ScriptedAgent().start(ctx)
    return ctx


def park(text: str) -> FakeContext:
    ctx = FakeContext(text)
    with pytest.raises(Parked):
        ScriptedAgent().start(ctx)
    return ctx


def resume(ctx: FakeContext, **outcome) -> FakeContext:
    """Resumes on a fresh context holding only the saved state, like another process."""
    later = FakeContext(ctx.text, state=ctx.state)
    ScriptedAgent().resume(later, ctx.outcome(**outcome))
    return later


# --- get_agent ----------------------------------------------------------------


def test_get_agent_knows_the_builtin_names_and_dotted_paths():
    """'scripted', 'openai' and a dotted class path each give a new instance."""
    assert isinstance(get_agent("scripted"), ScriptedAgent)
    assert isinstance(get_agent("openai"), OpenAIAgent)
    dotted = get_agent("sessions_app.runtime.agents.scripted.ScriptedAgent")
    assert isinstance(dotted, ScriptedAgent)
    assert get_agent("scripted") is not get_agent("scripted")


def test_get_agent_defaults_to_the_setting(settings):
    """Without a name, settings.AGENT_CLASS decides."""
    settings.AGENT_CLASS = "openai"
    assert isinstance(get_agent(), OpenAIAgent)


def test_get_agent_reports_an_unknown_class():
    """A name that imports nothing is a configuration error that names it."""
    with pytest.raises(ImproperlyConfigured, match="no.such.Agent"):
        get_agent("no.such.Agent")


# --- plain text -----------------------------------------------------------------


def test_plain_text_streams_several_deltas_then_their_concatenation():
    """A reply comes as several deltas; the message is exactly their concatenation."""
    ctx = run("hello there")
    assert len(ctx.deltas) > 2
    assert ctx.messages == ["".join(ctx.deltas)]
    assert ctx.messages[0].startswith("You said: hello there.")
    assert ctx.tool_requests == []
    assert ctx.calls[-1] == ("message", ctx.messages[0])


def test_plain_text_reply_stays_short_for_a_long_input():
    """A long input does not turn into thousands of deltas."""
    ctx = run("word " * 5000)
    assert 2 < len(ctx.deltas) <= 20
    assert ctx.messages == ["".join(ctx.deltas)]


def test_unknown_slash_command_is_plain_text():
    """An unknown command is answered like any other text."""
    ctx = run("/dance now")
    assert ctx.messages[0].startswith("You said: /dance now")
    assert ctx.tool_requests == []


# --- /stream ------------------------------------------------------------------


def test_stream_emits_exactly_n_deltas_ms_apart():
    """/stream N MS: N deltas tok0 .. tokN-1, MS between them, then the message."""
    ctx = run("/stream 5 30")
    assert ctx.deltas == ["tok0 ", "tok1 ", "tok2 ", "tok3 ", "tok4 "]
    assert ctx.sleeps == [0.03] * 4
    assert ctx.messages == ["tok0 tok1 tok2 tok3 tok4 "]
    assert [kind for kind, _ in ctx.calls][:3] == ["delta", "sleep", "delta"]


def test_stream_defaults_to_20_ms():
    """Without MS the deltas are 20 ms apart."""
    ctx = run("/stream 3")
    assert ctx.sleeps == [0.02, 0.02]
    assert len(ctx.deltas) == 3


def test_stream_with_zero_ms_never_sleeps():
    """MS 0 means no pause at all, even at the maximum N."""
    ctx = run("/stream 100000 0")
    assert len(ctx.deltas) == 100_000
    assert ctx.deltas[-1] == "tok99999 "
    assert ctx.sleeps == []
    assert ctx.messages == ["".join(ctx.deltas)]


def test_stream_zero_sends_an_empty_message():
    """/stream 0 emits no delta and an empty message."""
    ctx = run("/stream 0")
    assert ctx.deltas == []
    assert ctx.messages == [""]


@pytest.mark.parametrize(
    "text", ["/stream 100001", "/stream -1", "/stream 5 10001", "/stream 5 -1"]
)
def test_stream_out_of_bounds_is_an_error(text):
    """N over 100,000 or MS over 10,000 (or negative) ends the run with an error."""
    ctx = FakeContext(text)
    with pytest.raises(AgentError, match="between"):
        ScriptedAgent().start(ctx)
    assert ctx.calls == []


@pytest.mark.parametrize(
    "text",
    ["/stream", "/stream abc", "/stream 1.5", "/stream 1 2 3", "/stream 1_000", "/stream 5 x"],
)
def test_stream_malformed_is_an_error_stating_the_usage(text):
    """Missing or malformed arguments: an error whose message is the usage."""
    ctx = FakeContext(text)
    with pytest.raises(AgentError, match=r"usage: /stream N \[MS\]"):
        ScriptedAgent().start(ctx)
    assert ctx.calls == []


# --- /write -------------------------------------------------------------------


def test_write_parks_on_write_file_with_the_path_and_the_rest_of_the_line():
    """/write PATH TEXT asks for write_file {path, text}; TEXT keeps its spaces."""
    ctx = park("/write notes/today.txt hello   big world")
    assert [(tool, args) for tool, args, _ in ctx.tool_requests] == [
        ("write_file", {"path": "notes/today.txt", "text": "hello   big world"})
    ]
    assert ctx.deltas == [] and ctx.messages == []


@pytest.mark.parametrize("text", ["/write", "/write notes.txt", "/write notes.txt   "])
def test_write_without_text_is_an_error_stating_the_usage(text):
    """/write without TEXT ends the run with the usage and asks for nothing."""
    ctx = FakeContext(text)
    with pytest.raises(AgentError, match="usage: /write PATH TEXT"):
        ScriptedAgent().start(ctx)
    assert ctx.tool_requests == []


def test_write_resume_reports_approve_deny_and_failure():
    """After the gate: written, denied or failed (with the reason), then end_turn."""
    ctx = park("/write notes.txt hi")
    written = resume(ctx, output="appended 3 bytes to notes.txt")
    assert written.messages == ["Wrote to notes.txt: appended 3 bytes to notes.txt"]
    denied = resume(ctx, approved=False)
    assert denied.messages == ["The write to notes.txt was denied."]
    failed = resume(ctx, ok=False, output="symlinks are not allowed: notes.txt")
    assert failed.messages == ["The write to notes.txt failed: symlinks are not allowed: notes.txt"]
    for later in (written, denied, failed):
        assert later.tool_requests == []


@pytest.mark.django_db  # the quota reads who owns the workspace
def test_write_end_to_end_appends_exactly_once(settings, tmp_path):
    """Start, the tool executed once after approval, resume: one line in the file."""
    settings.AGENT_WORKSPACES = tmp_path
    workspace = workspace_for("s_demo")
    ctx = park("/write notes.txt hello world")
    tool, args, _ = ctx.tool_requests[0]
    ok, output = execute(tool, args, workspace)
    later = resume(ctx, ok=ok, output=output)
    assert (workspace / "notes.txt").read_text() == "hello world\n"
    assert later.messages == ["Wrote to notes.txt: appended 12 bytes to notes.txt"]


# --- /sh, /fail ---------------------------------------------------------------


def test_sh_parks_on_terminal_with_the_command():
    """/sh CMD asks for terminal {command: CMD}."""
    ctx = park("/sh ls -la sub")
    assert [(tool, args) for tool, args, _ in ctx.tool_requests] == [
        ("terminal", {"command": "ls -la sub"})
    ]


def test_sh_resume_reports_the_output_or_the_denial():
    """After the gate the message carries the output, the failure or the denial."""
    ctx = park("/sh echo hi")
    assert resume(ctx, output="hi\n").messages == ["$ echo hi\nhi\n"]
    assert resume(ctx, approved=False).messages == ["The command `echo hi` was denied."]
    failed = resume(ctx, ok=False, output="program not allowed: rm")
    assert failed.messages == ["The command `echo hi` failed:\nprogram not allowed: rm"]


def test_sh_without_a_command_is_an_error_stating_the_usage():
    """/sh alone ends the run with the usage."""
    with pytest.raises(AgentError, match="usage: /sh CMD"):
        ScriptedAgent().start(FakeContext("/sh"))


def test_fail_is_an_agent_error():
    """/fail ends the run with an error and emits nothing."""
    ctx = FakeContext("/fail")
    with pytest.raises(AgentError):
        ScriptedAgent().start(ctx)
    assert ctx.calls == []


# --- /echo and /markdown ------------------------------------------------------------


def test_echo_streams_the_text_back_exactly_cut_anywhere():
    """/echo streams everything after the command, newlines and markup included,
    in about a dozen deltas that concatenate to it, then the same message."""
    text = "# Title\n\n<script>x</script> **b**\n\n```py\nprint(1)\n```"
    ctx = run("/echo " + text)
    assert 2 < len(ctx.deltas) <= 12
    assert "".join(ctx.deltas) == text
    assert ctx.messages == [text]


def test_echo_without_text_is_a_usage_error():
    """/echo alone ends the run with its usage."""
    with pytest.raises(AgentError, match="usage: /echo TEXT"):
        run("/echo   ")


def test_markdown_streams_the_sample():
    """/markdown streams the built-in Markdown sample."""
    from sessions_app.runtime.agents.scripted import MARKDOWN_SAMPLE

    ctx = run("/markdown")
    assert "".join(ctx.deltas) == MARKDOWN_SAMPLE == ctx.messages[0]
    assert "| Quarter |" in MARKDOWN_SAMPLE and "```python" in MARKDOWN_SAMPLE


def test_tool_arguments_with_nan_are_not_json():
    """``/tool NAME JSON`` reads JSON as the standard has it: NaN is refused
    with the usage, never logged as arguments no browser could read."""
    with pytest.raises(AgentError, match="not JSON .*NaN"):
        run('/tool write_file {"path": "a.txt", "text": NaN}')


def test_hold_streams_until_the_test_releases_it(settings, tmp_path):
    """``/hold NAME`` says ``held0 `` at once and goes on until the file NAME
    appears in ``AGENT_TEST_HOLDS``; then its message is everything it said,
    once."""
    import threading

    settings.AGENT_TEST_HOLDS = str(tmp_path)
    ctx = FakeContext("/hold t1")
    held = threading.Thread(target=ScriptedAgent().start, args=(ctx,))
    held.start()
    assert ctx.delta_seen.wait(10)
    assert held.is_alive()  # not released: still going
    (tmp_path / "t1").touch()
    held.join(10)
    assert not held.is_alive()
    assert ctx.deltas[0] == "held0 " and ctx.messages == ["".join(ctx.deltas)]


def test_hold_with_a_pace_streams_that_often_and_checkpoints_once_a_second(settings, tmp_path):
    """``/hold NAME MS`` says something every MS milliseconds (traffic for as
    long as the test needs), and still checkpoints at most once a second:
    its first delta is one, the next few are not."""
    import threading

    from tests.support.waiting import wait_for

    settings.AGENT_TEST_HOLDS = str(tmp_path)
    ctx = FakeContext("/hold t2 5")
    held = threading.Thread(target=ScriptedAgent().start, args=(ctx,))
    held.start()
    wait_for(lambda: len(ctx.deltas) >= 5, timeout=10)
    (tmp_path / "t2").touch()
    held.join(10)
    assert not held.is_alive()
    said = len(ctx.deltas)
    assert ctx.deltas == [f"held{i} " for i in range(said)]
    assert ctx.messages == ["".join(ctx.deltas)]
    assert 1 <= len(ctx.checkpoints) < said and ctx.checkpoints[0]["next"] == 1


@pytest.mark.parametrize(
    "folder, text",
    [
        ("", "/hold t1"),
        ("x", "/hold"),
        ("x", "/hold a/b"),
        ("x", "/hold t1 0"),
        ("x", "/hold t1 x"),
    ],
)
def test_hold_is_refused_without_its_folder_or_a_plain_name(settings, folder, text):
    """Outside the tests (no ``AGENT_TEST_HOLDS``), and with a name that is
    not plain, ``/hold`` finishes with its usage, holding nothing."""
    settings.AGENT_TEST_HOLDS = folder
    with pytest.raises(AgentError, match="usage: /hold NAME"):
        run(text)
