"""Multi-tab scenarios that run in both profiles.

Each takes the browser context and the server of tab A and of tab B: in the
embedded profile both are the one shared daphne; in the production profile
(PostgreSQL + Redis, runs in worker processes) tab A is on one daphne and tab
B on another, so that everything B sees of A's actions crossed the Redis
channel layer.
"""

from __future__ import annotations

from datetime import timedelta

from playwright.sync_api import BrowserContext, Page, expect

from sessions_app.models import ApprovalRequest
from sessions_app.runtime.tools import workspace_for
from tests.browser.helpers import (
    TIMEOUT,
    Wire,
    assert_each_seq_once,
    assert_same_transcript,
    assert_shows_log,
    assistant_texts,
    client_state,
    cursor,
    events_of,
    expect_live,
    expect_state,
    frames_sent,
    log,
    mark,
    new_session,
    open_session,
    park,
    runs,
    send,
    server_closes_socket,
    settle,
    states_since,
    wait_cursor_at_least,
    wait_resumed,
)
from tests.support.rig import Hold

RESUMED = ["reconnecting", "resuming", "live"]


def long_stream() -> str:
    """A run that streams (a delta every 20 ms) until the test cancels it."""
    return Hold(pace=20).text


def cancel_after_more(session_id: str, pages: list[Page], more: int = 5) -> None:
    """With the run still streaming, let every tab apply ``more`` further
    events live, then cancel the run from the first tab."""
    assert runs(session_id)[-1].status == "running"
    for page in pages:
        wait_cursor_at_least(page, cursor(page) + more)
    pages[0].get_by_test_id("cancel-run").click()


def assert_streamed(session_id: str, pages: list[Page], stop_reason: str) -> None:
    """The session's one run streamed held0, held1, … (a step redone after a
    takeover is cut back by its run.resumed, never shown twice) and ended
    with ``stop_reason``; every tab shows exactly the log."""
    (run,) = runs(session_id)
    assert run.stop_reason == stop_reason
    text = ""
    for e in log(session_id):
        if e.kind == "assistant.delta":
            text += e.data["text"]
        elif e.kind == "run.resumed":
            text = text[: e.data["keep"]]
    Hold.answer(text)
    for page in pages:
        assert assistant_texts(page) == [text]
        assert_shows_log(page, session_id)


def tab(context: BrowserContext, server, session_id: str | None = None) -> tuple[Page, Wire]:
    """A new page with its wire recorder; on the session if one is given."""
    page = context.new_page()
    wire = Wire(page)
    if session_id is not None:
        open_session(page, server, session_id)
    return page, wire


def assert_resumed_on_new_socket(page: Page, wire: Wire, sockets: int = 2) -> None:
    """The tab's ``sockets``-th socket that carried frames resumed after the
    committed cursor and received first the event right after it (or a
    compacted stretch starting there). (Attempts refused while the network or
    the server is down carry no frame.)"""
    used = [s for s in wire.sockets if s["sent"]]
    assert len(used) == sockets
    state = client_state(page)
    after = state["lastResumeAfter"]
    last = used[-1]
    assert last["sent"][0]["type"] == "resume"
    assert last["sent"][0]["after"] == after
    assert state["firstReplayedSeq"] == after + 1
    assert first_replayed(last) == after + 1
    assert state["stats"]["duplicates"] == 0


def first_replayed(socket: dict) -> int | None:
    """The first seq a socket's replay carried: its first event's, or the first
    of a compacted stretch."""
    for f in socket["received"]:
        if f.get("type") == "event":
            return f["seq"]
        if f.get("type") == "compacted":
            return f["from"]
    return None


# --- case 1 ------------------------------------------------------------------------------


def socket_lost_mid_run(context: BrowserContext, server_a, server_b, fault: str) -> None:
    """Tab A loses its socket while a run streams; A (and B where the fault
    reaches it) goes reconnecting -> resuming -> live and ends showing the
    server's log exactly, every seq applied once.

    The stream is long and is cancelled from A once both tabs have resumed
    and received more of it live, so "mid-run" holds however slow the
    machine (an offline socket is only noticed by an unanswered ping, ~5 s)."""
    a, wire_a = tab(context, server_a)
    session_id = new_session(a, server_a)
    b, wire_b = tab(context, server_b, session_id)
    send(a, long_stream())
    wait_cursor_at_least(a, 10)
    wait_cursor_at_least(b, 10)
    since_a, since_b = mark(a), mark(b)

    if fault == "offline":
        context.set_offline(True)
        expect_state(a, "reconnecting")
        expect_state(b, "reconnecting")
        context.set_offline(False)
    elif fault == "client-drop":
        a.evaluate("() => window.__test.dropSocket()")
    else:
        server_closes_socket(a)
    wait_resumed(a, since_a)
    if fault == "offline":
        wait_resumed(b, since_b)
    cancel_after_more(session_id, [a, b])

    last = settle([a, b], session_id)
    assert_streamed(session_id, [a, b], "cancelled")
    assert_same_transcript(a, b)
    assert states_since(a, since_a) == RESUMED
    assert_each_seq_once(a, since_a, last)
    assert_resumed_on_new_socket(a, wire_a)
    if fault == "server-close":
        assert client_state(a)["framesSent"]["resume"] == 2
    if fault == "offline":
        assert states_since(b, since_b) == RESUMED
        assert_resumed_on_new_socket(b, wire_b)
    else:
        assert states_since(b, since_b) == []
        assert len(wire_b.sockets) == 1 and not wire_b.sockets[0]["closed"]
    assert_each_seq_once(b, since_b, last)


# --- case 3 ------------------------------------------------------------------------------


def refresh_at_gate(context: BrowserContext, server_a, server_b) -> None:
    """Refreshing tab A while its run is parked at a gate: the card is back at
    once (from the tab's cache, before any replay), B's card stays pending,
    approving in A continues the same tool call, B sees the decision live and
    the tool runs once."""
    a, _ = tab(context, server_a)
    session_id = new_session(a, server_a)
    b, wire_b = tab(context, server_b, session_id)
    since_b = mark(b)
    send(a, "/write gate.txt parked at the gate")
    approval_id = park([a, b], session_id)
    before = a.evaluate("() => window.__test.state().cursor")

    a.reload(wait_until="domcontentloaded")
    card = a.get_by_test_id("approval")
    at_once = a.evaluate(
        """() => ({
          cards: Array.from(document.querySelectorAll("[data-testid=approval]"))
            .map((el) => [el.dataset.approvalId, el.dataset.status]),
          firstCursor: window.__rec.cursors[0],
        })"""
    )
    # The refreshed tab rendered the card from its own cache at start-up: its
    # very first cursor is the one it had, not a replay from 0.
    assert at_once == {"cards": [[approval_id, "pending"]], "firstCursor": before}
    expect_live(a)
    assert client_state(a)["lastResumeAfter"] == before
    expect(card.get_by_test_id("approve")).to_be_enabled()
    expect(b.get_by_test_id("approval")).to_have_attribute("data-status", "pending")
    expect(b.get_by_test_id("approve")).to_be_enabled()

    card.get_by_test_id("approve").click()
    b_card = b.get_by_test_id("approval")
    expect(b_card).to_have_attribute("data-status", "approved", timeout=TIMEOUT)
    expect(b_card.get_by_test_id("approval-decision")).to_have_text("Approved by alice")
    last = settle([a, b], session_id)

    (run,) = runs(session_id)
    assert run.stop_reason == "end_turn"
    assert [e.kind for e in log(session_id)] == [
        "session.created",
        "user.message",
        "run.started",
        "tool.call",
        "approval.requested",
        "run.paused",
        "approval.decided",
        "tool.result",
        "assistant.message",
        "run.finished",
    ]
    (call,) = events_of(session_id, "tool.call")
    (requested,) = events_of(session_id, "approval.requested")
    (decided,) = events_of(session_id, "approval.decided")
    (result,) = events_of(session_id, "tool.result")
    call_id = call.data["tool_call_id"]
    assert requested.data["approval_id"] == decided.data["approval_id"] == approval_id
    assert requested.data["tool_call_id"] == result.data["tool_call_id"] == call_id
    assert decided.data["decided_by"] == "alice" and result.data["ok"] is True
    approval = ApprovalRequest.objects.get(id=approval_id)
    assert approval.executed_at is not None and approval.tool_call_id == call_id
    assert (workspace_for(session_id) / "gate.txt").read_text() == "parked at the gate\n"
    for page in (a, b):
        assert_shows_log(page, session_id)
        expect(page.get_by_test_id("approval-decision")).to_have_text("Approved by alice")
    assert_same_transcript(a, b)
    # B saw it all on its first socket: no reload, no reconnect.
    assert len(wire_b.sockets) == 1 and frames_sent(b)["resume"] == 1
    assert states_since(b, since_b) == []
    assert_each_seq_once(b, since_b, last)


# --- case 6 ------------------------------------------------------------------------------


def idle_tab_sees_short_run(context: BrowserContext, server_a, server_b) -> None:
    """A run under a second started in tab A appears in full in idle tab B:
    no focus, no reload, no polling (B makes no request and sends no frame but
    acks, and once whether its tab is visible)."""
    a, _ = tab(context, server_a)
    session_id = new_session(a, server_a)
    b, wire_b = tab(context, server_b, session_id)
    requests: list[str] = []
    b.on("request", lambda r: requests.append(r.url))
    since_b = mark(b)
    a.bring_to_front()

    send(a, "a short run please")
    reply = "You said: a short run please. This is the scripted demo agent."
    expect(b.get_by_test_id("assistant-message")).to_have_attribute(
        "data-final", "true", timeout=TIMEOUT
    )
    last = settle([a, b], session_id)

    started = events_of(session_id, "run.started")[0].created_at
    finished = events_of(session_id, "run.finished")[0].created_at
    assert finished - started < timedelta(seconds=1)
    assert assistant_texts(b) == [reply]
    assert_shows_log(b, session_id)
    assert_same_transcript(a, b)
    assert requests == []
    assert len(wire_b.sockets) == 1
    # (visibility: the page says, once, whether its tab is visible)
    assert {f["type"] for f in wire_b.sockets[0]["sent"]} <= {"resume", "ack", "ping", "visibility"}
    assert len(wire_b.sent(0, "visibility")) == 1
    assert len(wire_b.sent(0, "resume")) == 1
    assert states_since(b, since_b) == []
    assert_each_seq_once(b, since_b, last)


# --- case 9 ------------------------------------------------------------------------------


def _restart(servers) -> None:
    """Kill -9 every given daphne, then start each again on its port."""
    unique = list(dict.fromkeys(servers))
    for server in unique:
        server.kill()
    for server in unique:
        server.restart()


def server_restart(context: BrowserContext, server_a, server_b) -> None:
    """Every daphne is killed -9 and started again on its port, once while a
    run streams and once while the next run is parked at a gate: both tabs
    resume each time, the stream goes on (in its worker; in the embedded
    profile, where it died with its server, taken over from its last
    checkpoint by the restarted one), the gate is still pending and runs its
    tool once, and the transcripts are exactly the log."""
    a, wire_a = tab(context, server_a)
    session_id = new_session(a, server_a)
    b, wire_b = tab(context, server_b, session_id)

    # 1. During streaming.
    send(a, long_stream())
    wait_cursor_at_least(a, 10)
    wait_cursor_at_least(b, 10)
    since = [mark(a), mark(b)]
    _restart([server_a, server_b])
    for page, m in zip((a, b), since, strict=True):
        wait_resumed(page, m, timeout=30_000)
    cancel_after_more(session_id, [a, b])
    last = settle([a, b], session_id)
    assert_streamed(session_id, [a, b], "cancelled")
    for page, wire, m in zip((a, b), (wire_a, wire_b), since, strict=True):
        assert states_since(page, m) == RESUMED
        assert_each_seq_once(page, m, last)
        assert_resumed_on_new_socket(page, wire)
    assert_same_transcript(a, b)

    # 2. At a parked gate.
    send(a, "/write restart.txt survived the restart")
    approval_id = park([a, b], session_id)
    since = [mark(a), mark(b)]
    _restart([server_a, server_b])
    for page, m in zip((a, b), since, strict=True):
        wait_resumed(page, m, timeout=30_000)
        card = page.get_by_test_id("approval")
        expect(card).to_have_attribute("data-status", "pending")
        expect(card.get_by_test_id("approve")).to_be_enabled()
    assert ApprovalRequest.objects.get(id=approval_id).status == "pending"
    b.get_by_test_id("approve").click()
    expect(a.get_by_test_id("approval")).to_have_attribute("data-status", "approved")
    last = settle([a, b], session_id, runs=2)
    assert runs(session_id)[1].stop_reason == "end_turn"
    (result,) = events_of(session_id, "tool.result")
    assert result.data["ok"] is True
    assert ApprovalRequest.objects.get(id=approval_id).executed_at is not None
    assert (workspace_for(session_id) / "restart.txt").read_text() == "survived the restart\n"
    for page, wire, m in zip((a, b), (wire_a, wire_b), since, strict=True):
        assert states_since(page, m) == RESUMED
        assert_each_seq_once(page, m, last)
        assert_resumed_on_new_socket(page, wire, sockets=3)
        assert_shows_log(page, session_id)
        expect(page.get_by_test_id("approval-decision")).to_have_text("Approved by alice")
    assert_same_transcript(a, b)


def stop_and_send(context: BrowserContext, server_a, server_b) -> None:
    """Stop and send during a long stream: tab A stops the answer and sends a
    new message at once; tab B (on ``server_b``) watches. Both show the
    stopped run's notice saying why and the new answer, exactly the log; the
    input queued before stays queued and runs after it; each input was sent
    once."""
    a, _ = tab(context, server_a)
    session_id = new_session(a, server_a)
    b, _ = tab(context, server_b, session_id)
    first_text = long_stream()  # until the stop
    send(a, first_text)
    for page in (a, b):
        wait_cursor_at_least(page, 5)
    send(a, "/stream 1 0")  # queued behind the stream
    expect(a.get_by_test_id("queued-item")).to_have_count(1, timeout=TIMEOUT)
    stop = a.get_by_test_id("stop-and-send")
    expect(stop).to_be_visible(timeout=TIMEOUT)
    a.get_by_test_id("composer").fill("/stream 3 0")
    stop.click()
    settle([a, b], session_id, runs=3)
    first, queued, now = sorted(runs(session_id), key=lambda r: r.message_seq)
    assert (first.stop_reason, first.text) == ("cancelled", first_text)
    assert now.text == "/stream 3 0" and now.stop_reason == "end_turn"
    assert queued.stop_reason == "end_turn"
    assert now.started_at < queued.started_at, "the interrupting input ran first"
    for page in (a, b):
        notice = page.locator('[data-testid=run-notice][data-stop-reason="cancelled"]')
        expect(notice).to_have_text("Run cancelled: stopped for a newer message")
        expect(page.get_by_test_id("stop-and-send")).to_be_hidden()
        expect(page.get_by_test_id("user-message")).to_have_count(3)
        assert_shows_log(page, session_id)
    assert frames_sent(a)["send"] == 3
