"""The executor's stop signals (sessions_app/runtime/executor.py, base.py): an
agent cannot swallow them."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness import named_connections
from tests.support.rig import Hold
from tests.support.sessions import open_session, send_text, taken_over_once
from tests.support.waiting import wait_for, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


async def test_an_agent_catching_exception_cannot_swallow_a_cancel_or_a_park(
    own_server, cookie, tmp_path
):
    """Stop signals (RunAborted, Parked) are BaseExceptions, as
    asyncio.CancelledError is: an agent that wraps its streaming loop and its
    tool request in ``except Exception`` is still stopped at once, by a cancel
    and by its own gate, and never sees either in its except."""
    start, _ = own_server
    log = tmp_path / "careless.log"
    server = start(AGENT_CLASS="tests.fakes.CarelessAgent", CARELESS_AGENT_LOG=str(log))
    c, sid = await open_session(server, cookie)
    streaming = await send_text(c, "stream", "m1")
    await c.wait_event(lambda f: f["kind"] == "assistant.delta")
    assert (await c.request({"type": "cancel", "run_id": streaming["run_id"]}))["type"] == (
        "cancel_ok"
    )
    await wait_until(lambda: log.exists() and "stopped" in log.read_text())
    gated = await send_text(c, "/gate", "m2")
    await c.wait_event(lambda f: f["kind"] == "run.paused" and f["run_id"] == gated["run_id"])
    await wait_until(lambda: log.read_text().count("stopped") == 2)
    assert log.read_text().splitlines() == ["stopped RunAborted", "stopped Parked"]
    assert not [
        e for e in c.events() if e["run_id"] == gated["run_id"] and e["kind"] == "assistant.message"
    ], "nothing after the gate ran"
    await c.close()


def test_only_the_tool_results_own_checkpoint_goes_on_with_resume(user, no_enqueue):
    """A drive that goes on from a tool result's checkpoint calls resume with
    its outcome; the checkpoints that drive takes go on with start (a later
    takeover must not resume with a stale outcome)."""
    from sessions_app.log.sessions import create_session
    from sessions_app.models import Run
    from sessions_app.runtime import turns
    from sessions_app.runtime.executor import execute_run

    s = create_session(user)
    r = turns.submit_message(s.id, "a", "/write a.txt b")
    outcome = {
        "tool_call_id": "call_x",
        "tool": "write_file",
        "args": {"path": "a.txt", "text": "b"},
        "approved": True,
        "ok": True,
        "output": "appended 2 bytes to a.txt",
    }
    state = {"agent": {"tool": "write_file", "path": "a.txt"}, "entry": "resume", "keep": 0}
    Run.objects.filter(id=r.run_id).update(state={**state, "outcome": outcome})
    execute_run(r.run_id)
    run = Run.objects.get(id=r.run_id)
    assert run.stop_reason == "end_turn"
    assert run.state["entry"] == "start" and "outcome" not in run.state
    assert run.state["agent"]["done"] is True


def test_a_drive_logs_one_line_as_it_starts_and_one_as_it_ends(user, no_enqueue, caplog):
    """The operator's trail of a run: a line as its drive starts (which
    phase, which worker) and one as it ends (how)."""
    import logging

    from sessions_app.log.sessions import create_session
    from sessions_app.runtime import turns
    from sessions_app.runtime.executor import execute_run

    s = create_session(user)
    asked = turns.submit_message(s.id, "a", "hello")
    gated = turns.submit_message(s.id, "b", "/write a.txt b")
    with caplog.at_level(logging.INFO, logger="sessions_app.runtime.executor"):
        execute_run(asked.run_id)
        execute_run(gated.run_id)
    said = [r.getMessage() for r in caplog.records if r.name == "sessions_app.runtime.executor"]
    assert said[0].startswith(f"run {asked.run_id} start on ")
    assert said[1] == f"run {asked.run_id} finished end_turn"
    assert said[2].startswith(f"run {gated.run_id} start on ")
    assert said[3] == f"run {gated.run_id} parked at a gate"


APP_NAME = "agent-test-blip"  # the servers' connections' (libpq's PGAPPNAME)


def _terminate_the_servers_connections() -> int:
    return named_connections(APP_NAME, terminate=True)


@pytest.mark.postgres
async def test_a_database_blip_under_an_answer_is_taken_over_at_once(own_server, cookie):
    """PostgreSQL ends the servers' connections while an answer streams:
    the worker's next write fails, it connects again, and the run goes on
    from its last checkpoint (``run.resumed``, a takeover) at once, not when
    its lease lapses (60 s here; before, it waited for that), and ends
    ``end_turn`` with the whole answer once, and every seq once."""
    from asgiref.sync import sync_to_async

    start, _ = own_server
    server = start(PGAPPNAME=APP_NAME, AGENT_LEASE_SECONDS="60")
    c, _ = await open_session(server, cookie)
    hold = Hold(pace=50)
    sent = await send_text(c, hold.text, "m1")
    await c.wait_event(lambda f: f["kind"] == "assistant.delta" and "held5 " in f["data"]["text"])
    assert await sync_to_async(_terminate_the_servers_connections)() > 0
    await taken_over_once(c, sent["run_id"], hold)
    await c.close()


@pytest.mark.parametrize("error", ["django.db.DataError", "builtins.PermissionError"])
async def test_an_error_that_is_not_an_outage_ends_the_run_once(own_server, cookie, error):
    """A step that fails with a data error (a NUL PostgreSQL refuses) or a
    disk it may not write is no outage: the run ends ``error`` at once, its
    step is never redone (a paid model is not asked again), and the server
    logs its traceback."""
    start, procs = own_server
    server = start(AGENT_CLASS="tests.fakes.FaultyAgent", FAULTY_AGENT_ERROR=error)
    c, _ = await open_session(server, cookie)
    sent = await send_text(c, "hello", "m1")
    end = await c.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == sent["run_id"]
    )
    name = error.rsplit(".", 1)[1]
    assert end["data"] == {"stop_reason": "error", "message": f"internal error: {name}"}
    mine = [e["kind"] for e in c.events() if e["run_id"] == sent["run_id"]]
    assert "run.resumed" not in mine and mine.count("assistant.delta") == 1
    # The line may reach the test's pump of the server's output after the
    # frame reached the socket: waited for, not read at once.
    said = f"{name}: the step failed"
    await asyncio.to_thread(wait_for, lambda: any(said in p.log_text() for p in procs), 20)
    await c.close()
