"""A step of several gates in Chromium (``/parallel N``): every card of the
step at once in every tab, each decided on its own from either tab, with
refreshes between the decisions, or the whole step with Approve all / Deny
all; every tab ends showing the same outcomes, and the workspace holds
exactly the approved writes, once each."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from sessions_app.models import ApprovalRequest
from sessions_app.runtime.tools import workspace_for
from tests.browser.helpers import (
    TIMEOUT,
    assert_same_transcript,
    assert_shows_log,
    expect_live,
    new_session,
    send,
    settle,
    wait_run_status,
)
from tests.browser.scenarios import tab
from tests.support.waiting import wait_for

ROUNDS = 10


def _card(page: Page, approval_id: str):
    return page.locator(f"[data-testid=approval][data-approval-id='{approval_id}']")


def _step_cards(pages: list[Page], session_id: str) -> tuple[str, list[str]]:
    """Wait until the session's run is parked and every tab shows its four
    pending cards; the run and the approval ids, in the model's order."""
    run = wait_run_status(session_id, "awaiting_approval")
    for page in pages:
        cards = page.locator(f"[data-testid=approval][data-run-id='{run.id}']")
        expect(cards).to_have_count(4, timeout=TIMEOUT)
        for k in range(4):
            expect(cards.nth(k)).to_have_attribute("data-status", "pending")
    cards = pages[0].locator(f"[data-testid=approval][data-run-id='{run.id}']")
    return run.id, [cards.nth(k).get_attribute("data-approval-id") for k in range(4)]


def _decided(pages: list[Page], approval_id: str, status: str) -> None:
    for page in pages:
        expect(_card(page, approval_id)).to_have_attribute("data-status", status, timeout=TIMEOUT)


def _reload(page: Page) -> None:
    page.reload()
    expect_live(page)


def _lines(session_id: str, path: str) -> list[str]:
    written = workspace_for(session_id) / path
    return written.read_text().splitlines() if written.exists() else []


@pytest.mark.timeout(600)  # ten rounds of a whole step, two tabs and four refreshes each
def test_two_tabs_decide_one_step_interleaved_with_refreshes(server, ctx):
    """Ten rounds of /parallel 4: tab A approves 1 and 3, tab B denies 4 with
    a reason and edits 2, interleaved, each tab refreshed between
    decisions. Both tabs show the same four outcomes (the denial with its
    reason, the edit as one), and each file holds exactly writes 1 and 3
    and the edited 2, once each, in the model's order."""
    a, _ = tab(ctx, server)
    session_id = new_session(a, server)
    b, _ = tab(ctx, server, session_id)
    for i in range(ROUNDS):
        path = f"step{i}.txt"
        send(a if i % 2 == 0 else b, f"/parallel 4 {path}")
        _, ids = _step_cards([a, b], session_id)
        _card(a, ids[0]).get_by_test_id("approve").click()
        _decided([a, b], ids[0], "approved")
        _reload(b)
        _card(b, ids[3]).get_by_test_id("deny-reason").fill(f"not in round {i}")
        _card(b, ids[3]).get_by_test_id("deny").click()
        _decided([a, b], ids[3], "denied")
        _reload(a)
        _card(a, ids[2]).get_by_test_id("approve").click()
        _decided([a, b], ids[2], "approved")
        assert _lines(session_id, path) == []  # nothing runs before the last decision
        second = _card(b, ids[1])
        second.get_by_test_id("edit-call").locator("summary").click()
        second.get_by_test_id("edit-args").fill(f'{{"path": "{path}", "text": "edited {i}"}}')
        second.get_by_test_id("approve-edited").click()
        settle([a, b], session_id, runs=i + 1)
        for page in (a, b):
            statuses = [_card(page, x).get_attribute("data-status") for x in ids]
            assert statuses == ["approved", "edited", "approved", "denied"]
            expect(_card(page, ids[3]).get_by_test_id("approval-decision")).to_have_text(
                f"Denied by alice: not in round {i}"
            )
        assert _lines(session_id, path) == ["write 1", f"edited {i}", "write 3"]
    assert_same_transcript(a, b)
    for page in (a, b):
        assert_shows_log(page, session_id)


def test_approve_all_and_deny_all_decide_what_still_waits(server, ctx):
    """The step's cards offer Approve all (with the count still waiting)
    while more than one waits: one denied alone in tab B, then Approve all
    in tab A approves the other three; the buttons are gone; three writes."""
    a, _ = tab(ctx, server)
    session_id = new_session(a, server)
    b, _ = tab(ctx, server, session_id)
    send(a, "/parallel 4 all.txt")
    _, ids = _step_cards([a, b], session_id)
    expect(_card(a, ids[0]).get_by_test_id("approve-all")).to_have_text("Approve all 4")
    _card(b, ids[1]).get_by_test_id("deny").click()
    _decided([a, b], ids[1], "denied")
    expect(_card(a, ids[2]).get_by_test_id("approve-all")).to_have_text("Approve all 3")
    _card(a, ids[2]).get_by_test_id("approve-all").click()
    settle([a, b], session_id)
    for page in (a, b):
        for x, status in zip(ids, ["approved", "denied", "approved", "approved"], strict=True):
            expect(_card(page, x)).to_have_attribute("data-status", status)
            expect(_card(page, x).get_by_test_id("approve-all")).to_be_hidden()
    assert _lines(session_id, "all.txt") == ["write 1", "write 3", "write 4"]
    send(b, "/parallel 4 none.txt")
    wait_run_status(session_id, "awaiting_approval")
    cards = b.locator("[data-testid=approval][data-status=pending]")
    expect(cards).to_have_count(4, timeout=TIMEOUT)
    cards.first.get_by_test_id("deny-all").click()
    settle([a, b], session_id, runs=2)
    expect(a.locator("[data-testid=approval][data-status=denied]")).to_have_count(5)
    assert _lines(session_id, "none.txt") == []


def test_edit_respond_and_what_is_typed_survives_another_tabs_decision(server, ctx):
    """In a step of three: a reason typed into the third card stays while tab
    B approves the first (its cards are built again); the second is edited
    (the write runs with the person's text, the card says so) and the third
    answered instead (nothing runs; the answer is the result)."""
    a, _ = tab(ctx, server)
    session_id = new_session(a, server)
    b, _ = tab(ctx, server, session_id)
    send(a, "/parallel 3 edit.txt")
    run = wait_run_status(session_id, "awaiting_approval")
    cards = a.locator(f"[data-testid=approval][data-run-id='{run.id}']")
    expect(cards).to_have_count(3, timeout=TIMEOUT)
    ids = [cards.nth(k).get_attribute("data-approval-id") for k in range(3)]
    third = _card(a, ids[2])
    third.get_by_test_id("respond-call").locator("summary").click()
    third.get_by_test_id("respond-text").fill("Already written.")
    _card(b, ids[0]).get_by_test_id("approve").click()
    _decided([a, b], ids[0], "approved")
    expect(_card(a, ids[2]).get_by_test_id("respond-text")).to_have_value("Already written.")
    second = _card(a, ids[1])
    second.get_by_test_id("edit-call").locator("summary").click()
    second.get_by_test_id("edit-args").fill('{"path": "edit.txt", "text": "edited in the card"}')
    second.get_by_test_id("approve-edited").click()
    _decided([a, b], ids[1], "edited")
    _card(a, ids[2]).get_by_test_id("respond-instead").click()
    settle([a, b], session_id)
    for page in (a, b):
        expect(_card(page, ids[1]).get_by_test_id("approval-decision")).to_have_text(
            "Approved with edited arguments by alice"
        )
        expect(_card(page, ids[2]).get_by_test_id("approval-decision")).to_have_text(
            "Answered instead by alice: Already written."
        )
    assert _lines(session_id, "edit.txt") == ["write 1", "edited in the card"]


def test_a_card_counts_down_to_its_deadline_and_says_it_expired(own_server, ctx):
    """With a 5 s deadline the pending card shows the time left, warning in
    its last minute; at the deadline the server decides it and the card says
    it expired, its buttons gone; nothing was written."""
    start, _ = own_server
    server = start(AGENT_GATE_DEADLINE_SECONDS="5")
    a, _ = tab(ctx, server)
    session_id = new_session(a, server)
    send(a, "/write late.txt x")
    card = a.locator("[data-testid=approval]")
    deadline = card.get_by_test_id("approval-deadline")
    expect(deadline).to_have_text(re.compile(r"^Expires soon: 0:0[1-5]$"), timeout=TIMEOUT)
    expect(deadline).to_have_class(re.compile("approval-expiring"))
    # The suite's shared server sweeps this database too, and may be the one
    # that expires the gate: embedded, its event reaches only its own sockets
    # (one process serves a session live), so the tab reads the log again.
    wait_for(lambda: ApprovalRequest.objects.filter(status="expired").exists(), timeout=30)
    a.reload()
    expect_live(a)
    expect(card).to_have_attribute("data-status", "expired", timeout=TIMEOUT)
    expect(card.get_by_test_id("approval-decision")).to_have_text("Expired: nobody decided in time")
    expect(card.get_by_test_id("approve")).to_be_hidden()
    expect(deadline).to_have_count(0)
    settle(a, session_id)
    assert not (workspace_for(session_id) / "late.txt").exists()
