"""Long sessions in Chromium: a new tab gets a compacted replay, epoch rotation
reloads every open tab with a notice, and a tab past sessionStorage's quota
still works and still shows the transcript after a refresh."""

from __future__ import annotations

from playwright.sync_api import expect

from sessions_app.models import AgentSession
from tests.browser.helpers import (
    TIMEOUT,
    assert_shows_log,
    client_state,
    expect_live,
    new_session,
    open_tab,
    send,
    settle,
    wait_cursor,
)
from tests.logs_made import session_with_turns

FILL_STORAGE_JS = """() => {
  // Leave sessionStorage almost full: what the tab writes next does not fit.
  let n = 0;
  for (const size of [1_000_000, 100_000, 10_000, 1_000, 100]) {
    const chunk = "x".repeat(size);
    try {
      for (;;) sessionStorage.setItem(`filler-${n++}`, chunk);
    } catch (err) {
      // full at this size: go on with a smaller one
    }
  }
  return n;
}"""


def test_a_new_tab_gets_a_compacted_replay(server, ctx):
    """A tab opening a session with finished streamed runs receives each run's
    deltas as one skipped stretch and shows exactly the log's transcript."""
    a = ctx.new_page()
    session_id = new_session(a, server)
    send(a, "/stream 40 0")
    settle(a, session_id, runs=1)
    send(a, "/stream 30 0")
    settle(a, session_id, runs=2)
    b = open_tab(ctx, server, session_id)
    settle(b, session_id, runs=2)
    assert_shows_log(b, session_id)
    state = client_state(b)
    assert state["stats"]["compacted"] == 70 and state["stats"]["duplicates"] == 0
    # A refresh reads the tab's own cache and replays nothing.
    b.reload()
    expect_live(b)
    assert_shows_log(b, session_id)


def test_epoch_rotation_reloads_every_open_tab(server, ctx, django_user_model):
    """An operator rotates the epoch in the admin: both open tabs show the notice,
    drop their cache, reload from the start and end with the server's transcript;
    the session goes on."""
    epoch_rotation(ctx, server, server, django_user_model)


AT_BOTTOM_JS = """() => {
  const s = document.querySelector(".transcript-scroll");
  const answers = [...document.querySelectorAll("[data-testid=assistant-message]")];
  const last = answers[answers.length - 1].getBoundingClientRect();
  const view = s.getBoundingClientRect();
  return {
    gap: s.scrollHeight - s.scrollTop - s.clientHeight,
    lastInView: last.bottom <= view.bottom + 1 && last.bottom > view.top,
    answers: answers.length,
  };
}"""


def test_a_long_session_opens_at_its_last_answer(server, ctx, user):
    """A fresh tab and a refresh of a session of 120 turns (rows off screen
    are not rendered) both land at the bottom: the scroller is at its end and
    the last answer is in view."""
    paragraphs = [f"Paragraph {i} of a long answer.\n\n" for i in range(6)]
    session_id = session_with_turns(user, 120, answer=lambda t: [*paragraphs, f"Turn {t}."]).id
    page = open_tab(ctx, server, session_id)
    wait_cursor(page, AgentSession.objects.get(id=session_id).head)
    page.wait_for_function(f"() => ({AT_BOTTOM_JS})().gap <= 1", timeout=TIMEOUT)
    seen = page.evaluate(AT_BOTTOM_JS)
    assert seen["answers"] == 120 and seen["lastInView"], seen
    page.reload()
    expect_live(page)
    page.wait_for_function(f"() => ({AT_BOTTOM_JS})().gap <= 1", timeout=TIMEOUT)
    seen = page.evaluate(AT_BOTTOM_JS)
    assert seen["answers"] == 120 and seen["lastInView"], seen


def epoch_rotation(ctx, server_a, server_b, django_user_model) -> None:
    """Tab A on ``server_a``, tab B on ``server_b``; the rotation is made in
    ``server_a``'s admin."""
    from tests.runtime.test_runtime import _admin_post

    a = ctx.new_page()
    session_id = new_session(a, server_a)
    send(a, "/stream 5 0")
    settle(a, session_id, runs=1)
    b = open_tab(ctx, server_b, session_id)
    old_epoch = AgentSession.objects.get(id=session_id).epoch
    admin = django_user_model.objects.create_superuser("root", password="root-pass-1")
    _admin_post(
        server_a,
        admin,
        "/admin/sessions_app/agentsession/",
        {"action": "rotate_epochs", "_selected_action": session_id, "index": "0"},
    )
    epoch = AgentSession.objects.get(id=session_id).epoch
    assert epoch != old_epoch
    for page in (a, b):
        expect(page.get_by_test_id("notice")).to_contain_text(
            "rebuilt on the server", timeout=TIMEOUT
        )
        page.wait_for_function(f"() => window.__test.state().epoch === {epoch!r}")
        expect_live(page)
        settle(page, session_id, runs=1)
        assert_shows_log(page, session_id)
        assert client_state(page)["rejection"] is None
    send(b, "after the rotation")
    settle([a, b], session_id, runs=2)
    assert_shows_log(a, session_id)


def test_a_tab_past_the_storage_quota_still_works(server, ctx):
    """With sessionStorage full the tab streams and shows everything; a refresh
    (no cache could be written) reloads the transcript from the server."""
    a = ctx.new_page()
    session_id = new_session(a, server)
    assert a.evaluate(FILL_STORAGE_JS) > 0
    send(a, "/stream 300 0")
    settle(a, session_id, runs=1)
    assert_shows_log(a, session_id)
    a.reload()
    expect_live(a)
    settle(a, session_id, runs=1)
    assert_shows_log(a, session_id)
    send(a, "still here")
    settle(a, session_id, runs=2)
    assert_shows_log(a, session_id)
