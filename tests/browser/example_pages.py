"""The example pages of tests/clients (docs/integrations.md), bundled with
esbuild from the pinned packages and served on the server's own origin, as
a project would serve its bundle: their cookie and CSRF header are the
site's."""

from __future__ import annotations

import html
import shutil
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import TIMEOUT

CLIENTS = Path(__file__).resolve().parents[1] / "clients"


def bundle(name: str, into: Path) -> str:
    """``tests/clients/<name>`` bundled for a browser (an IIFE script)."""
    esbuild = CLIENTS / "node_modules" / ".bin" / "esbuild"
    if shutil.which("node") is None or not esbuild.exists():
        pytest.fail("tests/clients is not installed: npm ci --prefix tests/clients")
    out = into / "page.js"
    subprocess.run(
        [str(esbuild), str(CLIENTS / name), "--bundle", "--format=iife", f"--outfile={out}"],
        check=True,
        capture_output=True,
    )
    return out.read_text()


def open_example(ctx, server, script: str, **data: str):
    """A page with ``<div id="app" data-…>`` and the script, loaded."""
    page = ctx.new_page()
    # A page of the site first: its csrftoken cookie (a project's own page,
    # rendered by Django, sets it the same way).
    page.goto(f"{server.http}/")
    attrs = " ".join(f'data-{k.replace("_", "-")}="{html.escape(v)}"' for k, v in data.items())
    body = (
        f'<!doctype html><meta charset="utf-8"><div id="app" {attrs}></div>'
        '<script src="/__example__/page.js"></script>'
    )
    page.route(
        f"{server.http}/__example__/page.html",
        lambda r: r.fulfill(body=body, content_type="text/html"),
    )
    page.route(
        f"{server.http}/__example__/page.js",
        lambda r: r.fulfill(body=script, content_type="text/javascript"),
    )
    page.goto(f"{server.http}/__example__/page.html")
    expect(page.locator("#app")).to_have_attribute("data-loaded", "true", timeout=TIMEOUT)
    return page


def send(page, text: str) -> None:
    page.get_by_test_id("input").fill(text)
    page.get_by_test_id("input").press("Enter")


def shown(page) -> list[tuple[str, str]]:
    """The page's messages: (role, each text part joined by |)."""
    return page.eval_on_selector_all(
        "[data-testid=messages] > li",
        "els => els.map(e => [e.dataset.testid,"
        " [...e.querySelectorAll('[data-testid=text]')].map(p => p.textContent).join('|')])",
    )


def ready(page) -> None:
    """The page's client is idle (``#app[data-status=ready]``)."""
    expect(page.locator("#app")).to_have_attribute("data-status", "ready", timeout=TIMEOUT)


def refreshed_mid_answer(page) -> None:
    """A held answer, the page refreshed mid-answer (then released): it shows
    the whole answer, each delta once, and is ready again."""
    from sessions_app.models import Event, Run
    from tests.support.log import finished
    from tests.support.rig import Hold
    from tests.support.waiting import wait_for

    hold = Hold(pace=60)
    send(page, hold.text)
    last = page.get_by_test_id("assistant-message").last
    expect(last).to_contain_text("held3 ", timeout=TIMEOUT)
    run = Run.objects.order_by("-created_at").first()
    assert run.status == "running"
    page.reload()
    expect(page.locator("#app")).to_have_attribute("data-loaded", "true", timeout=TIMEOUT)
    hold.release()
    wait_for(lambda: finished(run.id))
    whole = Event.objects.get(run_id=run.id, kind="assistant.message").data["text"]
    assert Hold.answer(whole)
    expect(page.get_by_test_id("assistant-message").last).to_have_text(whole, timeout=TIMEOUT)
    ready(page)
    assert page.locator("#app").get_attribute("data-error") is None


def same_as_native(
    ctx, server, page, session_id: str, runs: int, *, textless: bool = False
) -> list[dict]:
    """What the page shows equals the native UI's transcript of the session
    (the users' messages, the answers' texts; ``textless``: the page also
    has assistant messages with no text, AG-UI's tool calls); the native
    items."""
    from tests.browser.helpers import settle, transcript

    page_shows = shown(page)
    native = ctx.new_page()
    native.goto(f"{server.http}/s/{session_id}/")
    settle(native, session_id, runs=runs)
    items = transcript(native)["items"]
    users = [i["text"] for i in items if i["kind"] == "user-message"]
    answers = [i["text"] for i in items if i["kind"] == "assistant-message"]
    assert [t for role, t in page_shows if role == "user-message"] == users
    page_answers = [
        t for role, t in page_shows if role == "assistant-message" and (t or not textless)
    ]
    assert "|".join(page_answers) == "|".join(answers)
    return items
