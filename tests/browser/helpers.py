"""What the browser tests read and do through the DOM contract.

Three kinds of evidence, all exact:

- the DOM contract (``data-testid`` elements and their ``data-*`` attributes),
  read in one ``evaluate`` so that a snapshot is consistent;
- a recorder (``RECORDER_JS``, installed as an init script on every test
  context) that logs every value the connection badge's ``data-state`` and
  the transcript's ``data-cursor`` take, so transient states ("resuming") and
  every committed seq are seen, not sampled;
- the server's truth: the event log (``read_events``), runs, approvals and
  the session's workspace. ``expected_transcript`` derives from the log what
  the transcript must show, item by item.

Waiting is always on a condition: ``expect`` on a DOM state, or ``wait_for``
for database states that no element shows.
"""

from __future__ import annotations

import json
import re
from typing import Any

from playwright.sync_api import BrowserContext, Page, expect

from sessions_app.models import Run
from tests.browser.transcripts import (  # noqa: F401 (re-exported: the tests import them from here)
    assert_same_transcript,
    assert_shows_log,
    assistant_texts,
    events_of,
    expected_transcript,
    head,
    log,
    log_kinds,
    rendered_seqs,
    transcript,
    transcript_text,
)
from tests.support.waiting import wait_for

TIMEOUT = 20_000  # ms, for DOM states that follow server work

# --- recorder -----------------------------------------------------------------------

RECORDER_JS = r"""() => {
  // Per document: a popup's initial about:blank hands its Window on to the
  // page it then loads (see open_from).
  if (document.__rec) return;
  const rec = { states: [], cursors: [] };
  Object.defineProperty(document, "__rec", { value: rec });
  Object.defineProperty(window, "__rec", { value: rec, configurable: true, writable: true });
  const watched = { "connection-state": "data-state", transcript: "data-cursor" };
  // A record carries the value *before* its mutation: the value after it is
  // the next record's oldValue for the same attribute, or the current value.
  new MutationObserver((records) => {
    records.forEach((r, i) => {
      const testid = r.target.getAttribute && r.target.getAttribute("data-testid");
      if (watched[testid] !== r.attributeName) return;
      const later = records
        .slice(i + 1)
        .find((n) => n.target === r.target && n.attributeName === r.attributeName);
      const value = later ? later.oldValue : r.target.getAttribute(r.attributeName);
      if (testid === "transcript") rec.cursors.push(Number(value));
      else rec.states.push(value);
    });
  }).observe(document, {
    subtree: true,
    attributes: true,
    attributeOldValue: true,
    attributeFilter: ["data-state", "data-cursor"],
  });
}"""


def install_recorder(context: BrowserContext) -> None:
    context.add_init_script(f"({RECORDER_JS})();")


def recorded(page: Page) -> dict[str, list]:
    """Everything the recorder saw on this page's current document."""
    return page.evaluate("() => ({states: [...__rec.states], cursors: [...__rec.cursors]})")


MARK_JS = """() => ({
  states: window.__rec.states.length,
  cursors: window.__rec.cursors.length,
  cursor: Number(document.querySelector("[data-testid=transcript]").dataset.cursor),
})"""


def mark(page: Page) -> dict[str, int]:
    """Positions in the recorder's logs and the committed cursor, read at one
    instant, to look at what happened after it."""
    return page.evaluate(MARK_JS)


def wait_resumed(page: Page, since: dict[str, int], timeout: float = TIMEOUT) -> None:
    """Wait until the tab went through "resuming" after ``since`` and is live again."""
    page.wait_for_function(
        "n => window.__rec.states.slice(n).includes('resuming')"
        " && document.querySelector('[data-testid=connection-state]').dataset.state === 'live'",
        arg=since["states"],
        timeout=timeout,
    )


def states_since(page: Page, since: dict[str, int] | None = None) -> list[str]:
    """The badge states shown since ``since``, consecutive repeats collapsed."""
    states = recorded(page)["states"][(since or {}).get("states", 0) :]
    return [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]


def cursors_since(page: Page, since: dict[str, int] | None = None) -> list[int]:
    return recorded(page)["cursors"][(since or {}).get("cursors", 0) :]


def assert_each_seq_once(page: Page, since: dict[str, int], end: int) -> None:
    """Since the mark, the cursor only moved forward, from past the mark's cursor
    to ``end``: nothing applied twice, nothing rolled back. Live, it moves one seq
    at a time; a replay is rendered once per animation frame and skips
    superseded stretches (compaction), so there it moves in steps. That nothing
    is missing is what the transcript checks (``assert_shows_log``)."""
    seen = cursors_since(page, since)
    assert seen, "the cursor never moved"
    assert seen == sorted(set(seen)), seen
    assert seen[0] > since["cursor"] and seen[-1] == end, (since["cursor"], seen, end)


def assert_each_live_seq_once(page: Page, since: dict[str, int], end: int) -> None:
    """Since the mark, with the tab live throughout, the cursor moved through
    ``cursor+1 … end`` one seq at a time: each live event is rendered as it comes."""
    assert cursors_since(page, since) == list(range(since["cursor"] + 1, end + 1))


# --- pages ----------------------------------------------------------------------------


def new_session(page: Page, server) -> str:
    """Create a session from the list page; returns its id once the tab is live."""
    page.goto(server.http + "/")
    page.get_by_test_id("new-session").click()
    expect_live(page)
    return page.get_by_test_id("transcript").get_attribute("data-session-id")


def session_url(server, session_id: str) -> str:
    return f"{server.http}/s/{session_id}/"


def open_session(page: Page, server, session_id: str) -> Page:
    page.goto(session_url(server, session_id))
    expect_live(page)
    return page


def open_tab(context: BrowserContext, server, session_id: str) -> Page:
    """A new page of the context (empty sessionStorage) on the session, live."""
    return open_session(context.new_page(), server, session_id)


def open_from(opener: Page, url: str) -> Page:
    """A tab opened by ``window.open`` from ``opener``: it starts with a copy of
    the opener's sessionStorage (its cached transcript and cursor included)."""
    with opener.context.expect_page() as info:
        opener.evaluate("url => { window.__opened = window.open(url); }", url)
    page = info.value
    expect_live(page)
    # Chromium runs the context's init scripts in the popup's initial
    # about:blank only, whose Window the loaded page then reuses: the recorder
    # is installed here, and sees what happens from now on.
    page.evaluate(RECORDER_JS)
    return page


def expect_live(page: Page, timeout: float = TIMEOUT) -> None:
    expect_state(page, "live", timeout)


def expect_state(page: Page, state: str, timeout: float = TIMEOUT) -> None:
    expect(page.get_by_test_id("connection-state")).to_have_attribute(
        "data-state", state, timeout=timeout
    )


def send(page: Page, text: str) -> None:
    composer = page.get_by_test_id("composer")
    composer.fill(text)
    composer.press("Enter")


def cursor(page: Page) -> int:
    return int(page.get_by_test_id("transcript").get_attribute("data-cursor"))


def wait_cursor(page: Page, seq: int, timeout: float = 30_000) -> None:
    expect(page.get_by_test_id("transcript")).to_have_attribute(
        "data-cursor", str(seq), timeout=timeout
    )


def wait_cursor_at_least(page: Page, seq: int, timeout: float = TIMEOUT) -> int:
    page.wait_for_function(
        "n => Number(document.querySelector('[data-testid=transcript]').dataset.cursor) >= n",
        arg=seq,
        timeout=timeout,
    )
    return cursor(page)


def client_state(page: Page) -> dict[str, Any]:
    """The client's own account (window.__test.state())."""
    return page.evaluate("() => window.__test.state()")


def frames_sent(page: Page) -> dict[str, int]:
    return page.evaluate("() => ({...window.__test.framesSent})")


def runs(session_id: str) -> list[Run]:
    return list(Run.objects.filter(session_id=session_id).order_by("message_seq"))


def wait_runs_finished(session_id: str, count: int, timeout: float = 30.0) -> list[Run]:
    """Wait until the session has exactly ``count`` runs, all finished."""

    def done():
        rows = runs(session_id)
        return rows if len(rows) == count and all(r.status == "finished" for r in rows) else None

    return wait_for(done, timeout)


def wait_run_status(session_id: str, status: str, timeout: float = 30.0) -> Run:
    rows = Run.objects.filter(session_id=session_id, status=status)
    return wait_for(lambda: rows.first(), timeout)


def settle(page: Page | list[Page], session_id: str, runs: int = 1) -> int:
    """Wait until the session has ``runs`` runs, all finished, and every tab
    has applied the whole log; returns the head."""
    wait_runs_finished(session_id, runs)
    last = head(session_id)
    for p in page if isinstance(page, list) else [page]:
        wait_cursor(p, last)
    return last


def park(pages: list[Page], session_id: str) -> str:
    """Wait until the session's run is parked at a gate and every tab shows the
    pending card (and the whole log); returns the approval id."""
    wait_run_status(session_id, "awaiting_approval")
    last = head(session_id)
    for p in pages:
        wait_cursor(p, last)
        card = p.get_by_test_id("approval")
        expect(card).to_have_attribute("data-status", "pending")
        expect(card.get_by_test_id("approve")).to_be_enabled()
    return pages[0].get_by_test_id("approval").get_attribute("data-approval-id")


# --- faults ---------------------------------------------------------------------------------


def server_closes_socket(page: Page) -> None:
    """Make the server close the tab's socket: a frame over 64 KiB written on
    it is refused with close code 4413 (docs/protocol.md, limits) and the client
    reconnects like after any non-fatal close."""
    page.evaluate("() => window.__test.client.conn.ws.send('x'.repeat(65 * 1024 + 1))")


class Wire:
    """Every session WebSocket of a page and the frames on it, as Chromium saw them (the
    frames of a ``batch`` message one by one, as the client handles them)."""

    def __init__(self, page: Page):
        self.sockets: list[dict[str, Any]] = []
        page.on("websocket", self._opened)

    def _opened(self, ws) -> None:
        if not ws.url.endswith("/ws/sessions/"):
            return  # the list page's socket (/ws/list/) is not a session's
        entry: dict[str, Any] = {"url": ws.url, "sent": [], "received": [], "closed": False}
        self.sockets.append(entry)
        ws.on("framesent", lambda payload: entry["sent"].append(_parse(payload)))
        ws.on("framereceived", lambda payload: entry["received"].extend(_frames(payload)))
        ws.on("close", lambda _ws: entry.update(closed=True))

    def sent(self, index: int, type_: str) -> list[dict[str, Any]]:
        return [f for f in self.sockets[index]["sent"] if f.get("type") == type_]

    def received(self, index: int, type_: str) -> list[dict[str, Any]]:
        return [f for f in self.sockets[index]["received"] if f.get("type") == type_]


def _frames(payload) -> list[dict[str, Any]]:
    frame = _parse(payload)
    if frame.get("type") == "batch" and isinstance(frame.get("frames"), list):
        return [f if isinstance(f, dict) else {"type": None} for f in frame["frames"]]
    return [frame]


def _parse(payload) -> dict[str, Any]:
    try:
        frame = json.loads(payload)
    except (TypeError, ValueError):
        return {"type": None, "raw_length": len(payload)}
    return frame if isinstance(frame, dict) else {"type": None}


def admin_delete_session(context: BrowserContext, server, admin_cookie: str, session_id: str):
    """Delete a session the way an operator does: the admin's delete
    confirmation page, in ``context`` (not logged in) as a superuser."""
    name, value = admin_cookie.split("=", 1)
    context.add_cookies([{"name": name, "value": value, "url": server.http, "httpOnly": True}])
    page = context.new_page()
    page.goto(f"{server.http}/admin/sessions_app/agentsession/{session_id}/delete/")
    confirm = page.get_by_role("button", name=re.compile("Yes, I.m sure"))
    if not confirm.is_visible():  # say what the admin shows instead
        raise AssertionError(f"no delete confirmation:\n{page.locator('body').inner_text()}")
    confirm.click()
    expect(page.locator(".messagelist")).to_contain_text("was deleted successfully")
    page.close()
