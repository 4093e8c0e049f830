"""What the browser tests read and do through the DOM contract."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from sessions_app.events import read_events
from sessions_app.models import AgentSession


def new_session(page: Page, server) -> str:
    """Create a session from the list page; returns its id once the tab is live."""
    page.goto(server.http + "/")
    page.get_by_test_id("new-session").click()
    expect_live(page)
    return page.get_by_test_id("transcript").get_attribute("data-session-id")


def open_session(page: Page, server, session_id: str) -> None:
    page.goto(f"{server.http}/s/{session_id}/")
    expect_live(page)


def expect_live(page: Page, timeout: float = 20_000) -> None:
    expect(page.get_by_test_id("connection-state")).to_have_attribute(
        "data-state", "live", timeout=timeout
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


def head(session_id: str) -> int:
    return AgentSession.objects.get(id=session_id).head


def rendered_seqs(page: Page) -> list[int]:
    """The data-seq of every rendered transcript item, in DOM order."""
    return page.eval_on_selector_all(
        "[data-testid=transcript] [data-seq]", "els => els.map(e => Number(e.dataset.seq))"
    )


def assistant_texts(page: Page) -> list[str]:
    return page.eval_on_selector_all(
        "[data-testid=assistant-message]", "els => els.map(e => e.textContent)"
    )


def log_kinds(session_id: str) -> list[str]:
    return [e.kind for e in read_events(session_id, 0)]


def wait_db(fetch, timeout: float = 30.0):
    """Wait for a database state no DOM attribute shows (e.g. a run finished)."""
    import time

    from tests.harness import poll_pause

    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("database state not reached")
        poll_pause()


def settle(page: Page, session_id: str) -> int:
    """Wait until no run of the session is active and the tab shows the whole log."""
    from sessions_app.models import Run

    wait_db(lambda: not Run.objects.filter(session_id=session_id, status__in=Run.ACTIVE).exists())
    last = head(session_id)
    wait_cursor(page, last)
    return last
