"""Durable runs in Chromium (docs/agents.md, "Steps and checkpoints"): the
answer outlives the process that streams it. kill -9 of every process
executing runs mid-answer, then one started again: the run is taken over
from its last checkpoint and the tab shows the whole answer exactly once,
live, after a refresh and in a fresh tab, with a quiet note. A rolling deploy
of the workers (SIGTERM each, a new one started first) never cuts a 30 s
answer."""

from __future__ import annotations

import signal

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.browser.helpers import (
    assert_shows_log,
    assistant_texts,
    new_session,
    open_tab,
    send,
    settle,
    wait_cursor_at_least,
    wait_runs_finished,
)
from tests.harness import Worker
from tests.support.log import logged
from tests.support.rig import Hold
from tests.support.waiting import wait_for

pytestmark = pytest.mark.browser


def _shows_answer_once(page, session_id: str) -> None:
    """The page shows the run's one answer (held0 … each once), exactly the log."""
    settle(page, session_id)
    [message] = logged(session_id, "assistant.message")
    assert assistant_texts(page) == [message["text"]] and Hold.answer(message["text"])
    assert_shows_log(page, session_id)


def test_kill_9_of_every_executor_mid_answer_shows_the_answer_once(server, daphnes, ctx):
    """Every process executing runs dies mid-answer (production: both workers;
    embedded: the server); one is started again. The run finishes end_turn and
    the tab shows the whole answer once (live, refreshed, fresh), with the
    "resumed after a server restart" note."""
    production = settings.AGENT_RUNNER == "worker"
    site = server if production else daphnes()
    page = ctx.new_page()
    session_id = new_session(page, site)
    hold = Hold(pace=50)
    send(page, hold.text)
    wait_cursor_at_least(page, 40)  # past a checkpoint or two
    if production:
        for worker in server.workers:
            worker.kill()
        server.workers[0].start()
    else:
        site.restart()
    wait_for(lambda: logged(session_id, "run.resumed"), timeout=60)
    hold.release()
    (run,) = wait_runs_finished(session_id, 1, timeout=60)
    assert run.stop_reason == "end_turn"
    expect(page.get_by_test_id("run-resumed")).to_have_text("Resumed after a server restart")
    _shows_answer_once(page, session_id)
    page.reload()
    _shows_answer_once(page, session_id)
    fresh = open_tab(ctx, site, session_id)
    _shows_answer_once(fresh, session_id)


@pytest.mark.postgres
def test_a_rolling_deploy_of_the_workers_never_cuts_an_answer(server, ctx, tmp_path):
    """A 30 s answer in flight; each worker is stopped with SIGTERM in turn, a
    new one started first. The answer is never cut: it finishes end_turn and
    the tab shows it whole and once."""
    page = ctx.new_page()
    session_id = new_session(page, server)
    hold = Hold(pace=100)
    send(page, hold.text)
    wait_cursor_at_least(page, 20)
    fresh = []
    try:
        for old in list(server.workers):
            fresh.append(Worker(tmp_path).start())
            old.kill(signal.SIGTERM)
            assert old.proc.returncode == 0
            wait_cursor_at_least(page, 20 + 10 * len(fresh))  # it goes on
        hold.release()
        (run,) = wait_runs_finished(session_id, 1, timeout=90)
    finally:
        for worker in fresh:
            worker.kill()
    assert run.stop_reason == "end_turn"
    _shows_answer_once(page, session_id)
