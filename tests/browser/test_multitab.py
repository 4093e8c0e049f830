"""Multi-tab failures from the seed notes, reproduced in real Chromium.

One test per failure, named after it. Tabs are pages of one browser context
(one login) unless a case says otherwise. Faults are injected only through
the browser (``context.set_offline``, page refreshes, ``window.open``), the
protocol (a frame over the size limit, which the server answers by closing the
socket), real processes (daphne killed -9 and restarted) and the client's test
hooks (``window.__test``: ``dropSocket``, the ``after-receive`` /
``after-render`` / ``after-send`` failpoints). Every test asserts exact
outcomes: seq lists, transcript items and text against the server's log,
counts of runs and of tool executions.

Production-profile variants of cases 1, 3, 6 and 9 (two daphne processes on
PostgreSQL + Redis) are in test_multitab_production.py.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.runtime.tools import workspace_for
from tests.browser import scenarios
from tests.browser.helpers import (
    TIMEOUT,
    admin_delete_session,
    assert_each_seq_once,
    assert_same_transcript,
    assert_shows_log,
    assistant_texts,
    client_state,
    events_of,
    expect_live,
    expect_state,
    frames_sent,
    mark,
    new_session,
    open_from,
    park,
    runs,
    send,
    session_url,
    settle,
    states_since,
    wait_cursor_at_least,
    wait_resumed,
)
from tests.browser.scenarios import (
    RESUMED,
    assert_streamed,
    cancel_after_more,
    long_stream,
    tab,
)
from tests.harness import session_cookie
from tests.support.rig import Hold
from tests.support.waiting import wait_for


# 1. The socket reconnects but the agent starts over / the session returns with a hole.
@pytest.mark.parametrize("fault", ["offline", "client-drop", "server-close"])
def test_socket_lost_mid_run_resumes_without_hole_or_repeat(server, ctx, fault):
    """``offline``: context.set_offline (both tabs lose the network; the
    client notices by its ping going unanswered); ``client-drop``:
    __test.dropSocket(); ``server-close``: the server closes tab A's socket
    (4413, after a frame over 64 KiB)."""
    scenarios.socket_lost_mid_run(ctx, server, server, fault)


# 2. Replay fills the gap but repeats output.
@pytest.mark.parametrize("failpoint", ["after-receive", "after-render"])
def test_drop_between_receipt_render_and_ack_replays_from_the_cursor(server, ctx, failpoint):
    """Dropped after receipt but before render: the resume asks after the
    cursor, so the received event comes again. Dropped after render but before
    its ack: the cursor already includes it, so it does not. Either way the
    first replayed seq is cursor+1 and nothing shows twice."""
    a, wire = tab(ctx, server)
    session_id = new_session(a, server)
    hold = Hold(pace=40)
    send(a, hold.text)
    wait_cursor_at_least(a, 10)
    # Read the cursor and arm in one task: the next event applied is cursor+1.
    armed = a.evaluate(
        """name => {
          const c = Number(document.querySelector("[data-testid=transcript]").dataset.cursor);
          window.__test.failpoint(name);
          return {states: __rec.states.length, cursors: __rec.cursors.length, cursor: c};
        }""",
        failpoint,
    )
    hit = armed["cursor"] + 1
    wait_resumed(a, armed)
    after = hit - 1 if failpoint == "after-receive" else hit
    # A fast resume can find nothing new to replay yet: the first event after
    # it (replayed or live) is what the assertions below are about.
    a.wait_for_function("() => window.__test.state().firstReplayedSeq !== null")
    hold.release()

    state = client_state(a)
    assert state["lastResumeAfter"] == after
    assert state["firstReplayedSeq"] == after + 1
    first, second = wire.sockets
    assert hit in [f["seq"] for f in first["received"] if f.get("type") == "event"]
    assert max([f["seq"] for f in first["sent"] if f.get("type") == "ack"], default=0) < hit
    assert second["sent"][0] == {**second["sent"][0], "type": "resume", "after": after}
    assert scenarios.first_replayed(second) == after + 1

    last = settle(a, session_id)
    # The cursor only moved forward: for after-render, `hit` was committed
    # before the drop and is not applied again (the replay is rendered in
    # frames, so the cursor moves in steps there).
    assert_each_seq_once(a, armed, last)
    assert states_since(a, armed) == RESUMED
    [answer] = assistant_texts(a)
    Hold.answer(answer)
    assert_shows_log(a, session_id)
    assert client_state(a)["stats"]["duplicates"] == 0


# 3. Refresh while paused on an approval gate loses the gate.
def test_refresh_at_an_approval_gate_keeps_the_gate(server, ctx):
    scenarios.refresh_at_gate(ctx, server, server)


# 4. Second browser permanently stuck on a stale partial transcript.
def test_tab_opened_mid_run_never_stays_stale(server, ctx):
    """Tab B opened with window.open while A's run grows (it starts from a copy
    of A's cached, partial transcript) and tab C opened empty both end with
    exactly A's transcript: deltas, a tool call, an approval round-trip and
    its result, also after reloading them."""
    a, _ = tab(ctx, server)
    session_id = new_session(a, server)
    hold = Hold(pace=40)
    send(a, hold.text)
    send(a, "/write grow.txt grown in place")
    wait_cursor_at_least(a, 12)
    b = open_from(a, session_url(server, session_id))
    since_b = mark(b)
    c, _ = tab(ctx, server, session_id)
    # B resumed (on its only socket) after the cursor of the copy it started from.
    b_start = client_state(b)["lastResumeAfter"]
    assert b_start > 0  # a stale partial copy of A's transcript
    hold.release()  # B and C opened mid-run

    park([a, b, c], session_id)
    assert b_start < events_of(session_id, "run.finished")[0].seq  # opened mid-run
    b.get_by_test_id("approve").click()
    last = settle([a, b, c], session_id, runs=2)

    for page in (a, b, c):
        assert_shows_log(page, session_id)
    assert_same_transcript(a, b, c)
    answer, wrote = assistant_texts(a)
    assert Hold.answer(answer) and wrote == "Wrote to grow.txt: appended 15 bytes to grow.txt"
    assert_each_seq_once(b, since_b, last)
    assert (workspace_for(session_id) / "grow.txt").read_text() == "grown in place\n"
    for page in (b, c):
        page.reload()
        expect_live(page)
        assert_shows_log(page, session_id)
    assert_same_transcript(a, b, c)


# 5. One browser tab kills another's live stream.
def test_other_tabs_never_kill_a_stream(server, ctx):
    """Opening, closing and refreshing other tabs of the session (new pages
    and window.open copies) while A streams: A's socket is never closed, A
    never leaves "live", and its stream arrives whole."""
    a, wire_a = tab(ctx, server)
    session_id = new_session(a, server)
    since = mark(a)
    send(a, long_stream())
    wait_cursor_at_least(a, 6)

    b, _ = tab(ctx, server, session_id)
    b.close()
    c, _ = tab(ctx, server, session_id)
    c.reload()
    expect_live(c)
    d = open_from(a, session_url(server, session_id))
    d.reload()
    expect_live(d)
    d.close()
    e = open_from(c, session_url(server, session_id))
    e.close()
    # All of that happened mid-stream; A then ends the run itself.
    cancel_after_more(session_id, [a, c])

    last = settle([a, c], session_id)
    assert_streamed(session_id, [a, c], "cancelled")
    assert states_since(a, since) == []
    assert len(wire_a.sockets) == 1 and not wire_a.sockets[0]["closed"]
    assert frames_sent(a)["resume"] == 1
    assert_each_seq_once(a, since, last)
    assert_same_transcript(a, c)
    # Presence: of the other tabs only C is still open.
    expect(a.get_by_test_id("viewers")).to_have_attribute("data-count", "1")


# 6. Second open tab misses short runs entirely.
def test_idle_tab_sees_short_runs(server, ctx):
    scenarios.idle_tab_sees_short_run(ctx, server, server)


# 7. The ambiguous send: the client knows it sent, not whether the server got it.
@pytest.mark.parametrize("refresh", [False, True], ids=["reconnect", "refresh"])
def test_ambiguous_send_is_delivered_once(server, ctx, refresh):
    """The socket is cut right after the `send` frame is written (failpoint
    after-send), before its send_ok. ``reconnect``: the tab reconnects by
    itself. ``refresh``: the page is refreshed inside that window (the tab's
    new sockets reach no server until after the refresh, so the window stays
    open) and the ledger, restored from sessionStorage, finds the input
    already delivered: it is not sent again."""
    text = "exactly once please"
    gate = {"open": True}
    a, wire = tab(ctx, server)
    if refresh:

        def route(ws):
            if gate["open"]:
                ws.connect_to_server()

        a.route_web_socket(re.compile(r"/ws/sessions/$"), route)
    session_id = new_session(a, server)
    since = mark(a)
    gate["open"] = not refresh
    a.evaluate("() => window.__test.failpoint('after-send')")
    send(a, text)
    pending = a.get_by_test_id("pending-message")

    if refresh:
        expect(pending).to_have_attribute("data-state", "sent")
        cmid = pending.get_attribute("data-client-message-id")
        # The server has it; the tab does not know: its new socket is unanswered.
        wait_for(lambda: Run.objects.filter(session_id=session_id, client_message_id=cmid).exists())
        expect_state(a, "resuming")
        a.reload()
        expect(pending).to_have_attribute("data-client-message-id", cmid)
        expect(pending).to_have_attribute("data-state", "sent")
        assert [(e["id"], e["state"]) for e in client_state(a)["ledger"]] == [(cmid, "sent")]
        expect(a.get_by_test_id("user-message")).to_have_count(0)
        gate["open"] = True
        a.evaluate("() => window.__test.dropSocket()")  # rather than the 20 s handshake timeout
        expect_live(a)
    else:
        wait_resumed(a, since)
    user_messages = a.get_by_test_id("user-message")
    expect(user_messages).to_have_count(1)
    expect(pending).to_have_count(0)
    settle(a, session_id)

    (run,) = runs(session_id)
    cmid = user_messages.get_attribute("data-client-message-id")
    assert (run.client_message_id, run.text, run.stop_reason) == (cmid, text, "end_turn")
    assert [e.data["client_message_id"] for e in events_of(session_id, "user.message")] == [cmid]
    assert client_state(a)["ledger"] == []
    assert_shows_log(a, session_id)
    if refresh:
        assert frames_sent(a).get("send", 0) == 0  # confirmed by the replay, not re-sent
    else:
        assert states_since(a, since) == RESUMED
        sends = [f for s in wire.sockets for f in s["sent"] if f.get("type") == "send"]
        assert {f["client_message_id"] for f in sends} == {cmid}
        # (Chromium may still receive the first send_ok during the closing
        # handshake; the client had let go of that socket and never saw it.)
        # If the input was written again, the server said it had it already.
        assert [f["status"] for f in wire.received(1, "send_ok")] == ["duplicate"] * (
            len(sends) - 1
        )


# 8. Two tabs approve at the same moment.
def test_simultaneous_approvals_decide_once(server, ctx):
    """Tabs A and B (opened by A, so one script can click in both in the same
    task) approve at the same moment: both decide frames are written before
    either tab hears of a decision. One decision stands, by one decider, both
    tabs show it, the loser is told, and the tool runs once."""
    a, _ = tab(ctx, server)
    session_id = new_session(a, server)
    b = open_from(a, session_url(server, session_id))
    send(a, "/write race.txt decided once")
    approval_id = park([a, b], session_id)
    a.evaluate(
        """() => {
          const here = document.querySelector("[data-testid=approve]");
          const there = window.__opened.document.querySelector("[data-testid=approve]");
          here.click();
          there.click();
        }"""
    )
    for page in (a, b):
        card = page.get_by_test_id("approval")
        expect(card).to_have_attribute("data-status", "approved", timeout=TIMEOUT)
        expect(card.get_by_test_id("approval-decision")).to_have_text("Approved by alice")
    # Exactly one tab was told that the other's decision came first.
    a.wait_for_function(
        """() => [document, window.__opened.document]
            .filter((d) => !d.querySelector("[data-testid=notice]").hidden).length === 1"""
    )
    notices = [p.get_by_test_id("notice") for p in (a, b)]
    shown = [n.text_content() for n in notices if n.is_visible()]
    assert shown == ["Already approved by alice."]
    assert frames_sent(a)["decide"] == frames_sent(b)["decide"] == 1
    settle([a, b], session_id)

    (decided,) = events_of(session_id, "approval.decided")
    assert decided.data == {
        "approval_id": approval_id,
        "decision": "approve",
        "decided_by": "alice",
    }
    (result,) = events_of(session_id, "tool.result")
    assert result.data["ok"] is True
    approval = ApprovalRequest.objects.get(id=approval_id)
    assert (approval.status, approval.decided_by) == ("approved", "alice")
    assert approval.executed_at is not None
    assert (workspace_for(session_id) / "race.txt").read_text() == "decided once\n"
    for page in (a, b):
        assert_shows_log(page, session_id)
    assert_same_transcript(a, b)


# 9. The server restarts under open tabs.
def test_server_restart_resumes_every_tab(daphnes, ctx):
    """A dedicated daphne (runs execute inside it) is killed -9 and started
    again on the same port while a run streams (the restarted server takes
    the run over from its last checkpoint) and while the next one is parked
    at a gate (the gate survives)."""
    server = daphnes()
    scenarios.server_restart(ctx, server, server)


# 10. A failed resume silently falls back to a new session.
DROP_IF_LIVE = """() => {
  const state = document.querySelector('[data-testid="connection-state"]').dataset.state;
  if (state === "live") window.__test.dropSocket();
  return state;
}"""


def test_deleted_session_is_rejected_not_replaced(
    server, ctx, new_context, django_user_model, user
):
    """The session is deleted in the admin while a tab is open; when the tab
    next resumes (its socket closed 1013 by the server's tail check, or by
    the network, whichever comes first) it shows "rejected" with reason
    not_found, keeps its URL and neither retries nor starts a session of its
    own."""
    a, wire = tab(ctx, server)
    session_id = new_session(a, server)
    send(a, "hello before the deletion")
    settle(a, session_id)
    root = django_user_model.objects.create_superuser("root", password="root-pass-1")
    since = mark(a)
    admin_delete_session(new_context(logged_in=False), server, session_cookie(root), session_id)
    assert not AgentSession.objects.filter(id=session_id).exists()

    # Dropped unless the server closed it already: one JS turn, no race.
    a.evaluate(DROP_IF_LIVE)
    badge = a.get_by_test_id("connection-state")
    expect(badge).to_have_attribute("data-state", "rejected", timeout=TIMEOUT)
    expect(badge).to_have_attribute("data-reason", "not_found")
    rejection = a.get_by_test_id("rejection")
    expect(rejection).to_be_visible()
    expect(rejection).to_have_attribute("data-reason", "not_found")
    expect(a.get_by_test_id("rejection-message")).to_contain_text("Nothing was created")
    expect(a.get_by_test_id("composer")).to_be_disabled()
    # A browser signal that would wake a waiting reconnect changes nothing.
    a.evaluate("() => window.dispatchEvent(new Event('online'))")
    assert a.evaluate(
        "() => [window.__test.client.conn.running, window.__test.client.conn.isWaiting]"
    ) == [False, False]
    assert states_since(a, since) == ["reconnecting", "resuming", "rejected"]
    assert client_state(a)["rejection"]["reason"] == "not_found"
    assert frames_sent(a) == {**frames_sent(a), "resume": 2} and "start" not in frames_sent(a)
    used = [s for s in wire.sockets if s["sent"]]
    assert [[f["type"] for f in s["sent"] if f["type"] in ("start", "resume")] for s in used] == [
        ["resume"],
        ["resume"],
    ]
    assert wire.received(1, "resume_rejected")[0]["reason"] == "not_found"
    assert a.url == session_url(server, session_id)
    assert AgentSession.objects.filter(owner=user).count() == 0


# 11. Inputs sent during a run.
def test_inputs_queued_behind_a_run_run_in_order(server, ctx):
    """Three inputs sent quickly in tab A during a run: tab B shows them
    queued, in order, then three runs, one after the other, in that order."""
    a, _ = tab(ctx, server)
    session_id = new_session(a, server)
    b, _ = tab(ctx, server, session_id)
    hold = Hold(pace=30)
    send(a, hold.text)
    wait_cursor_at_least(b, 4)
    texts = ["first in line", "second in line", "third in line"]
    for text in texts:
        send(a, text)
    queued = b.get_by_test_id("queue").get_by_test_id("queued-item")
    expect(queued).to_have_count(3, timeout=TIMEOUT)
    expect(queued).to_contain_text(texts)
    queued_ids = [queued.nth(i).get_attribute("data-client-message-id") for i in range(3)]
    hold.release()
    settle([a, b], session_id, runs=4)

    rows = runs(session_id)
    assert [r.text for r in rows] == [hold.text, *texts]
    assert [r.client_message_id for r in rows[1:]] == queued_ids
    assert [r.stop_reason for r in rows] == ["end_turn"] * 4
    assert [e.data["client_message_id"] for e in events_of(session_id, "run.queued")] == queued_ids
    started = events_of(session_id, "run.started")
    finished = events_of(session_id, "run.finished")
    assert [e.run_id for e in started] == [e.run_id for e in finished] == [r.id for r in rows]
    for done, nxt in zip(finished, started[1:], strict=False):
        assert done.seq < nxt.seq  # one after the other
    expect(queued).to_have_count(0)
    answer, *replies = assistant_texts(b)
    assert Hold.answer(answer) and replies == [
        f"You said: {t}. This is the scripted demo agent." for t in texts
    ]
    assert_shows_log(b, session_id)
    assert_same_transcript(a, b)


# 12. Inputs typed while offline.
@pytest.mark.parametrize("noticed", [True, False], ids=["noticed", "unnoticed"])
def test_offline_typing_is_sent_once_in_order(server, ctx, noticed):
    """Messages typed while the browser is offline are sent once the
    connection is back: in order, each exactly once, one run each.
    ``noticed``: typed after the tab showed "reconnecting", they wait as
    pending and are written nowhere. ``unnoticed``: typed right after the
    network went away, before the tab could know, they are written into the
    dead socket ("sent", unconfirmed) and written again, with the same ids,
    on the new one."""
    a, wire = tab(ctx, server)
    session_id = new_session(a, server)
    since = mark(a)
    ctx.set_offline(True)
    if noticed:
        expect_state(a, "reconnecting")
    texts = ["typed offline one", "typed offline two", "typed offline three"]
    for text in texts:
        send(a, text)
    pending = a.get_by_test_id("pending-message")
    expect(pending).to_have_count(3)
    expect(pending).to_have_text([re.compile(f"^{t}") for t in texts])
    state = "prepared" if noticed else "sent"
    expect(pending.nth(2)).to_have_attribute("data-state", state)
    assert [p.get_attribute("data-state") for p in pending.all()] == [state] * 3
    ids = [p.get_attribute("data-client-message-id") for p in pending.all()]
    assert frames_sent(a).get("send", 0) == (0 if noticed else 3)
    expect_state(a, "reconnecting")
    assert Run.objects.filter(session_id=session_id).count() == 0

    ctx.set_offline(False)
    expect(pending).to_have_count(0, timeout=TIMEOUT)
    last = settle(a, session_id, runs=3)
    rows = runs(session_id)
    assert [(r.client_message_id, r.text) for r in rows] == list(zip(ids, texts, strict=True))
    assert [e.data["client_message_id"] for e in events_of(session_id, "user.message")] == ids
    used = [s for s in wire.sockets if s["sent"]]
    assert len(used) == 2
    written = [[f["client_message_id"] for f in s["sent"] if f.get("type") == "send"] for s in used]
    if noticed:
        assert written == [[], ids]
    else:
        # The dead socket took all three. Chromium may still deliver them when
        # the network is back; what the replay then shows as delivered (a
        # prefix: the log keeps their order) is not written again.
        assert written[0] == ids
        assert written[1] == ids[len(ids) - len(written[1]) :]
    assert frames_sent(a)["send"] == sum(map(len, written))
    assert states_since(a, since) == RESUMED
    assert_each_seq_once(a, since, last)
    assert_shows_log(a, session_id)
