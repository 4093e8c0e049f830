"""runtime/context.py: the text a gate closes, read back from the log."""

from __future__ import annotations

import pytest

from sessions_app.log.events import NewEvent, append_events
from sessions_app.log.sessions import create_session
from sessions_app.models import Run
from sessions_app.runtime import turns
from sessions_app.runtime.context import Context
from sessions_app.wire import protocol as p

pytestmark = pytest.mark.django_db(transaction=True)


def test_open_text_is_the_segment_as_a_tab_shows_it(user, no_enqueue):
    """The open segment's text: deltas since the run's last message, tool call
    or result, each run.resumed cutting it back to its keep; a drive taken
    over reads it from the log (it knows only the length)."""
    s = create_session(user)
    r = turns.submit_message(s.id, "a", "x")
    run_id = r.run_id

    def log(kind, **data):
        append_events(s.id, [NewEvent(kind, data, run_id)])

    log(p.K_ASSISTANT_DELTA, text="old ")
    log(p.K_ASSISTANT_MESSAGE, text="old ")
    log(p.K_ASSISTANT_DELTA, text="Let me ")
    log(p.K_ASSISTANT_DELTA, text="chec")
    log(p.K_RUN_RESUMED, reason="takeover", keep=7)
    log(p.K_ASSISTANT_DELTA, text="check.")
    ctx = Context(Run.objects.get(id=run_id), "w:1:x")
    assert ctx.open_text() == "Let me check."
