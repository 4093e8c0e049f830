"""What sessions_app.testing ships to a site that embeds the app: the fake
run context an agent's unit test drives, and the fixtures (a live server on
the test database, a signed-in client) a site's own tests use."""

from __future__ import annotations

import pytest

from sessions_app.models import Event, Run
from sessions_app.runtime.base import AgentError, Parked
from sessions_app.testing import FakeContext
from tests.support.waiting import wait_for


class EchoToFile:
    """docs/agents.md's own agent ("Your own agent"), as written there."""

    def start(self, ctx):
        if not ctx.text.strip():
            raise AgentError("nothing to write")
        ctx.delta("I'd like to save that. ")
        ctx.request_tool(
            "write_file", {"path": "inbox.txt", "text": ctx.text}, state={"step": "saving"}
        )

    def resume(self, ctx, outcome):
        if not outcome.approved:
            ctx.message("OK, I did not save it.")
        elif outcome.ok:
            ctx.message(f"Saved: {outcome.output}")
        else:
            raise AgentError(f"could not save: {outcome.output}")


def test_the_fake_context_drives_an_agent_as_docs_agents_md_shows():
    """docs/agents.md's FakeContext example, to the letter: the agent's text,
    its tool request (parked), and its resume with the outcome."""
    ctx = FakeContext("buy milk")
    with pytest.raises(Parked):
        EchoToFile().start(ctx)
    assert ctx.deltas == ["I'd like to save that. "]
    assert ctx.tool_requests[0][:2] == ("write_file", {"path": "inbox.txt", "text": "buy milk"})
    after = FakeContext(state=ctx.state)
    EchoToFile().resume(after, ctx.outcome(output="appended 8 bytes"))
    assert after.messages == ["Saved: appended 8 bytes"]
    assert after.state == {"step": "saving"}


@pytest.mark.django_db(transaction=True)
def test_a_site_runs_a_session_on_its_live_server_as_a_signed_in_user(settings, agent_client):
    """agent_server runs the site on the test database, runs included;
    agent_client is signed in with a cookie and the CSRF header: a session
    is made, a message sent, and its answer logged; without the cookie the
    API refuses."""
    if settings.AGENT_RUNNER == "worker":
        pytest.skip("runs in the embedded profile only: the production one's need run workers")
    status, made = agent_client.post("/api/sessions/")
    assert status == 201, made
    sent = {"client_message_id": "m1", "text": "/echo from the fixture"}
    status, reply = agent_client.post(f"/api/sessions/{made['id']}/messages/", sent)
    assert status == 201, reply
    wait_for(lambda: Run.objects.filter(id=reply["run_id"], status="finished").exists())
    said = Event.objects.filter(session_id=made["id"], kind="assistant.message").get()
    assert said.data["text"] == "from the fixture"
    agent_client.cookies.clear()
    status, _ = agent_client.get(f"/api/sessions/{made['id']}/")
    assert status in (401, 403)
