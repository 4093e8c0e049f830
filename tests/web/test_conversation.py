"""The conversation as the dialects read it (sessions_app/web/conversation.py):
history comes in pages, by turns and by bytes, newest first, never the
whole conversation in one response; the pages, followed back by their
``before``, give every turn once and in order."""

from __future__ import annotations

import json

import httpx
import pytest

from sessions_app.web import conversation
from tests.harness import api_key
from tests.logs_made import session_with_turns

pytestmark = pytest.mark.django_db(transaction=True)


def pages(session, **kw) -> list[conversation.Page]:
    """Every page of the session's path, newest first, following ``before``."""
    out = [conversation.path_turns(session, **kw)]
    while out[-1].before is not None:
        out.append(conversation.path_turns(session, before=out[-1].before, **kw))
    return out


def test_history_comes_in_pages_of_turns_that_follow_back_with_no_gap(user):
    """120 turns: pages of 50, 50 and 20, newest first; each names the run
    before which the older turns are, the first turn's page none."""
    session = session_with_turns(user, 120, linked=True)
    found = pages(session)
    assert [len(page.turns) for page in found] == [50, 50, 20]
    texts = [turn.text for page in reversed(found) for turn in page.turns]
    assert texts == [f"question {t}" for t in range(120)]
    assert found[0].before == found[0].turns[0].run_id
    assert all(turn.events for page in found for turn in page.turns)


def test_a_page_holds_about_a_megabyte_however_long_the_turns(user):
    """Turns of 32k characters asked and answered: a page stops before the
    turn that would pass PAGE_BYTES (the newest always whole), and the pages
    still give every turn once."""
    big = 32_000
    session = session_with_turns(
        user,
        40,
        question=lambda t: f"{t:02d}" + "q" * big,
        answer=lambda t: ["a" * big],
        linked=True,
    )
    found = pages(session)
    for page in found:
        size = sum(
            len(turn.text) + sum(len(json.dumps(e.data)) for e in turn.events)
            for turn in page.turns
        )
        assert size <= conversation.PAGE_BYTES
        assert size > conversation.PAGE_BYTES - 3 * (2 * big + 1000) or page is found[-1]
    texts = [turn.text[:2] for page in reversed(found) for turn in page.turns]
    assert texts == [f"{t:02d}" for t in range(40)]


def test_a_run_of_another_session_is_no_page(user, other_user):
    """``before`` names a run of this session, or the request is refused:
    another user's run ids give nothing of their conversation."""
    mine = session_with_turns(user, 3, linked=True)
    theirs = session_with_turns(other_user, 3, linked=True)
    with pytest.raises(conversation.NoSuchTurn):
        conversation.path_turns(mine, before=theirs.leaf_run_id)


def test_the_dialects_serve_history_a_page_at_a_time(server, user):
    """The AI SDK's messages: 50 turns a page, X-Agent-Older to the rest,
    ?limit to ask fewer; AG-UI's join: a snapshot of the newest page."""
    session = session_with_turns(user, 120, linked=True)
    key = api_key(user)
    with httpx.Client(
        base_url=server.http, headers={"Authorization": f"Token {key}"}, timeout=60
    ) as c:
        url = f"/api/ai-sdk/chat/{session.id}/messages"
        got, older, sizes = [], None, []
        while True:
            page = c.get(url, params={"before": older} if older else {})
            assert page.status_code == 200
            sizes.append(len(page.json()))
            got = page.json() + got
            older = page.headers.get("X-Agent-Older")
            if older is None:
                break
        assert sizes == [100, 100, 40]
        asked = [m["parts"][0]["text"] for m in got if m["role"] == "user"]
        assert asked == [f"question {t}" for t in range(120)]
        assert len(c.get(url, params={"limit": 5}).json()) == 10
        assert c.get(url, params={"limit": 500}).status_code == 400
        assert c.get(url, params={"before": "run_nope"}).status_code == 404
        joined = c.get(f"/api/ag-ui/{session.id}/stream")
        snapshot = next(
            json.loads(line[6:])
            for line in joined.text.splitlines()
            if line.startswith("data: ") and "MESSAGES_SNAPSHOT" in line
        )
        assert len(snapshot["messages"]) == 100
        assert snapshot["messages"][0]["content"] == "question 70"
