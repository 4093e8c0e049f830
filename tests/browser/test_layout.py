"""The transcript with Markdown and the live list, on a desktop and a phone:
nothing overflows the page sideways (wide tables and code scroll inside the
message). The same runs make the screenshots in docs/screenshots/:
``UPDATE_SCREENSHOTS=1`` writes them there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import TIMEOUT, new_session, send, settle

SHOTS = Path(__file__).resolve().parent.parent.parent / "docs" / "screenshots"

OVERFLOW_JS = """
() => {
  const width = document.documentElement.clientWidth;
  const scroller = document.querySelector(".transcript-scroll");
  const out = (e, right) => e.getBoundingClientRect().right > right + 1;
  // Inside a message, only code and tables may be wider than it: they scroll in their box.
  const spill = Array.from(document.querySelectorAll("[data-testid=assistant-message]"))
    .flatMap((m) => Array.from(m.querySelectorAll("*"))
      .filter((e) => !e.closest(".md-pre, .md-table") && out(e, m.getBoundingClientRect().right))
      .map((e) => e.tagName));
  return {
    page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    scroller: scroller ? scroller.scrollWidth - scroller.clientWidth : 0,
    wide: Array.from(document.querySelectorAll("[data-testid=transcript] > *, .session-card"))
      .filter((e) => out(e, width)).map((e) => e.className),
    spill,
  };
}
"""

FITS = {"page": 0, "scroller": 0, "wide": [], "spill": []}

WIDE = (
    "| " + " | ".join(f"column{n}" for n in range(12)) + " |\n"
    "|" + "---|" * 12 + "\n"
    "| " + " | ".join(f"value{n}withoutspaces" for n in range(12)) + " |\n\n"
    "```text\n" + "x" * 300 + "\n```"
)

# The last answer's table and code are wider than their boxes (so they scroll),
# and no table cell is broken across lines mid-word.
SCROLLS_JS = """
() => {
  const last = Array.from(document.querySelectorAll("[data-testid=assistant-message]")).pop();
  const boxes = Array.from(last.querySelectorAll(".md-pre, .md-table"));
  const lines = (e) => {
    const r = document.createRange();
    r.selectNodeContents(e);
    return new Set(Array.from(r.getClientRects(), (x) => Math.round(x.top))).size;
  };
  return boxes.length === 2
    && boxes.every((e) => e.scrollWidth > e.clientWidth)
    && Array.from(last.querySelectorAll("td, th")).every((c) => lines(c) === 1);
}
"""


def _shoot(page, name: str, tmp_path: Path) -> None:
    target = SHOTS if os.environ.get("UPDATE_SCREENSHOTS") == "1" else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / f"{name}.png"))
    assert (target / f"{name}.png").stat().st_size > 10_000


@pytest.mark.parametrize(("label", "width", "height"), [("1280", 1280, 860), ("375", 375, 812)])
def test_markdown_and_the_list_fit_the_screen(server, ctx, tmp_path, label, width, height):
    """At 1280 and 375 px wide, the session page with a Markdown answer (table,
    code) and the list page do not scroll sideways."""
    page = ctx.new_page()
    page.set_viewport_size({"width": width, "height": height})
    session_id = new_session(page, server)
    send(page, "Plan the quarterly report, please.")
    settle(page, session_id)
    send(page, "/markdown")
    settle(page, session_id, runs=2)
    expect(page.get_by_test_id("running")).to_be_hidden()
    assert page.evaluate(OVERFLOW_JS) == FITS
    page.get_by_test_id("code-block").scroll_into_view_if_needed()
    _shoot(page, f"transcript-markdown-{label}", tmp_path)
    # A table and a code line far wider than any screen: they scroll in their boxes.
    send(page, "/echo " + WIDE)
    settle(page, session_id, runs=3)
    assert page.evaluate(OVERFLOW_JS) == FITS
    assert page.evaluate(SCROLLS_JS), "the wide table and code do not scroll in their boxes"

    other = new_session(ctx.new_page(), server)
    other_page = ctx.pages[-1]
    send(other_page, "/write notes.txt hello")
    expect(other_page.get_by_test_id("approve")).to_be_visible(timeout=TIMEOUT)
    page.goto(server.http + "/")
    expect(page.locator("body")).to_have_attribute("data-list-live", "true", timeout=TIMEOUT)
    card = page.locator(f'[data-testid=session-link][data-session-id="{other}"]')
    expect(card).to_have_attribute("data-status", "awaiting_approval", timeout=TIMEOUT)
    assert page.evaluate(OVERFLOW_JS) == FITS
    _shoot(page, f"session-list-{label}", tmp_path)
