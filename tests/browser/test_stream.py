"""The SSE stream read by the browser's own ``EventSource`` (no code of ours
on the client side), through a kill -9 of its server: it reconnects by itself
with ``Last-Event-ID``, and what it received equals the log, no gap, no repeat."""

from __future__ import annotations

import httpx

from sessions_app.log.events import read_events
from sessions_app.wire import protocol as p
from tests.browser.helpers import new_session, runs, wait_runs_finished
from tests.harness import api_key
from tests.support.log import logged
from tests.support.rig import Hold
from tests.support.waiting import wait_for

KINDS = [v for k, v in vars(p).items() if k.startswith("K_")]

# An EventSource on the stream, every event it receives kept in order.
FOLLOW_JS = """
([url, kinds]) => {
  window.__seen = [];
  window.__opened = 0;
  const es = new EventSource(url);
  es.onopen = () => { window.__opened += 1; };
  for (const kind of kinds) {
    es.addEventListener(kind, (e) => window.__seen.push([Number(e.lastEventId), kind]));
  }
  window.__es = es;
}
"""


def test_event_source_survives_a_kill_9_with_no_gap_and_no_repeat(daphnes, ctx, user):
    """Chromium's EventSource follows a streaming run; its daphne is killed -9
    and started again on its port; EventSource reconnects on its own (with
    Last-Event-ID) and, once the run has ended, the events it received are
    exactly the log: every seq once, in order, each with its kind."""
    server = daphnes()
    page = ctx.new_page()
    session_id = new_session(page, server)
    page.evaluate(FOLLOW_JS, [f"/api/sessions/{session_id}/stream/?after=0", KINDS])
    page.wait_for_function("() => window.__seen.length >= 1")
    auth = {"Authorization": f"Token {api_key(user)}"}
    hold = Hold(pace=20)
    sent = httpx.post(
        f"{server.http}/api/sessions/{session_id}/messages/",
        json={"client_message_id": "m1", "text": hold.text},
        headers=auth,
        timeout=30,
    )
    assert sent.status_code == 201
    page.wait_for_function("() => window.__seen.length >= 20")
    server.restart()
    wait_for(lambda: logged(session_id, "run.resumed"), timeout=60)  # taken over
    hold.release()
    (run,) = wait_runs_finished(session_id, 1, timeout=60)
    head = max(e.seq for e in read_events(session_id, 0))
    page.wait_for_function(
        "head => window.__seen.length && window.__seen[window.__seen.length - 1][0] >= head",
        arg=head,
        timeout=60_000,
    )
    seen = page.evaluate("() => window.__seen")
    log = read_events(session_id, 0)
    assert [s for s, _ in seen] == [e.seq for e in log]
    assert [k for _, k in seen] == [e.kind for e in log]
    assert page.evaluate("() => window.__opened") >= 2, "it reconnected by itself"
    assert runs(session_id)[0].id == run.id
