"""Whose question an MCP server asks (runtime/mcp_hub.py): a question is
tied to its call by the call's own task or by the call named in its
``_meta``, never guessed from the calls in flight; a call that timed out
stays known, as ended, so that a late question for it is declined; every
call carries its caller in ``_meta``. Driven against a hand-written server
on the 2025-06-18 protocol (tests/mcp/legacy_server.py), whose questions
arrive outside their call's task."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from sessions_app.runtime.mcp_hub import CALL_META, Caller, McpUnavailable, hub
from sessions_app.wire import protocol as p
from tests.mcp import ROOT
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class Person:
    """How a user is asked (``questions.Asker``'s interface): says yes, and
    remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def ask(self, message: str, schema: dict) -> tuple[str, dict]:
        self.asked.append(message)
        return p.APPROVE, {}

    def stop(self) -> None:
        pass


@pytest.fixture
def legacy(settings, tmp_path):
    """The legacy server as ``legacy``, and its folder of files."""
    settings.AGENT_MCP_CALL_SECONDS = 30.0
    settings.AGENT_MCP_SERVERS = {
        "legacy": {
            "command": [sys.executable, "-m", "tests.mcp.legacy_server"],
            "env": {"LEGACY_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
        }
    }
    yield tmp_path
    for key, (client, _stop) in list(hub().conns.items()):
        hub().forget(key, client)


def answers(folder) -> list[str]:
    found = folder / "answers"
    return found.read_text().splitlines() if found.exists() else []


def in_thread(fn) -> tuple[threading.Thread, list]:
    got: list = []

    def work() -> None:
        try:
            got.append(fn())
        except Exception as exc:  # noqa: BLE001 (the test reads it)
            got.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, got


ALICE = Caller(1, "alice", "s_alice", "run_a")
BOB = Caller(2, "bob", "s_bob", "run_b")


def test_a_timed_out_calls_question_never_reaches_another_users_call(legacy, settings):
    """Alice's call times out; the server then asks its question, naming no
    call, while Bob's call is the only one in flight: Bob is never asked,
    and the server hears "decline"."""
    alice, bob = Person(), Person()
    settings.AGENT_MCP_CALL_SECONDS = 0.5
    with pytest.raises(McpUnavailable, match="no answer within"):
        hub().call("legacy", "ask", {"name": "a-private-report.pdf"}, alice, ALICE)
    settings.AGENT_MCP_CALL_SECONDS = 30.0
    waiting, got = in_thread(lambda: hub().call("legacy", "wait", {"name": "b"}, bob, BOB))
    wait_for(lambda: (legacy / "waiting-b").exists())
    (legacy / "go-a-private-report.pdf").touch()
    wait_for(lambda: answers(legacy))
    (legacy / "go-b").touch()
    waiting.join(30)
    assert answers(legacy) == ["ask decline"]
    assert bob.asked == [] and alice.asked == []
    assert got == [(True, "waited b")]


def test_a_question_naming_its_call_reaches_that_calls_user(legacy):
    """A question that names its call in ``_meta`` is asked of that call's
    user, even with another user's call in flight beside it."""
    alice, bob = Person(), Person()
    waiting, _ = in_thread(lambda: hub().call("legacy", "wait", {"name": "b"}, bob, BOB))
    wait_for(lambda: (legacy / "waiting-b").exists())
    (legacy / "go-x.txt").touch()
    result = hub().call("legacy", "ask_named", {"name": "x.txt"}, alice, ALICE)
    (legacy / "go-b").touch()
    waiting.join(30)
    assert result == (True, "asked about x.txt")
    assert alice.asked == ["Delete the file x.txt?"] and bob.asked == []
    assert answers(legacy) == ["ask_named accept"]


def test_a_late_question_for_a_call_that_ended_is_declined(legacy, settings):
    """A question naming a call that has timed out is declined, and its user
    is not asked after the call was given up."""
    alice = Person()
    settings.AGENT_MCP_CALL_SECONDS = 0.5
    with pytest.raises(McpUnavailable):
        hub().call("legacy", "ask_named", {"name": "late.txt"}, alice, ALICE)
    (legacy / "go-late.txt").touch()
    wait_for(lambda: answers(legacy))
    assert answers(legacy) == ["ask_named decline"]
    assert alice.asked == []


def test_a_call_carries_its_callers_identity(legacy):
    """Every call's ``_meta`` names the user, the session and the run, and
    the call's own id."""
    ok, text = hub().call("legacy", "whoami", {}, Person(), ALICE)
    sent = json.loads(text)[CALL_META]
    assert ok
    assert {k: sent[k] for k in ("user", "user_id", "session", "run")} == {
        "user": "alice",
        "user_id": 1,
        "session": "s_alice",
        "run": "run_a",
    }
    assert len(sent["call"]) == 16


def test_a_user_scoped_server_gives_each_user_a_connection_of_their_own(legacy, settings):
    """With ``scope: user``, two users' calls go on two connections (two
    server processes), and one user's calls share theirs."""
    settings.AGENT_MCP_SERVERS = {
        "legacy": {**settings.AGENT_MCP_SERVERS["legacy"], "scope": "user"}
    }
    for caller in (ALICE, BOB, ALICE):
        hub().call("legacy", "whoami", {}, Person(), caller, scope="user")
    assert sorted(key for key in hub().conns if key.startswith("legacy")) == [
        "legacy|u1",
        "legacy|u2",
    ]
