"""The executor's stop signals (sessions_app/runtime/executor.py, base.py): an
agent cannot swallow them."""

from __future__ import annotations

import pytest

from tests.harness import wait_until
from tests.runtime.common import open_session, send_text

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
