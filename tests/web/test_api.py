"""REST API and pages: ownership, CSRF, validation."""

from __future__ import annotations

import pytest
from django.test import Client

from sessions_app.log.events import append_event
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, ApprovalRequest, Event, Run

pytestmark = pytest.mark.django_db


def test_anonymous_is_refused(client):
    """Logged-in users only: the API says 403, pages redirect to the login."""
    assert client.get("/api/sessions/").status_code == 403
    page = client.get("/")
    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/")


def test_list_and_create_sessions(client_for, user, other_user):
    """A user lists only their own sessions; POST creates one with session.created."""
    create_session(other_user, "not mine")
    c = client_for(user)
    made = c.post("/api/sessions/", {"title": "mine"}, content_type="application/json")
    assert made.status_code == 201 and made.json()["head"] == 1
    listed = c.get("/api/sessions/").json()
    assert [s["title"] for s in listed["results"]] == ["mine"] and listed["count"] == 1


def test_csrf_is_enforced_on_api_writes(client_for, user):
    """A session-authenticated POST without the CSRF token is refused."""
    c = client_for(user, csrf=True)
    assert c.post("/api/sessions/", {}, content_type="application/json").status_code == 403
    assert AgentSession.objects.count() == 0


def test_events_after_cursor(client_for, user):
    """GET events?after=N returns the frames after N, as the socket would."""
    s = create_session(user)
    for i in range(3):
        append_event(s.id, "assistant.delta", {"text": str(i)})
    body = client_for(user).get(f"/api/sessions/{s.id}/events/?after=2").json()
    assert [e["seq"] for e in body["events"]] == [3, 4] and body["head"] == 4
    bad = client_for(user).get(f"/api/sessions/{s.id}/events/?after=-1")
    assert bad.status_code == 400


def parked_gate(owner):
    """A session of ``owner`` with a run parked at a real approval gate."""
    from sessions_app.runtime import runs, turns
    from sessions_app.runtime.gates import Gate

    s = create_session(owner)
    sent = turns.submit_message(s.id, "m1", "/write a.txt x")
    Run.objects.filter(id=sent.run_id).update(worker="w")
    (approval_id,) = runs.park(
        sent.run_id,
        "w",
        s.id,
        [Gate("call_" + s.id, "write_file", {"path": "a.txt", "text": "x"})],
        state={},
    )
    return s, sent.run_id, approval_id


def test_other_users_objects_are_404(client_for, user, other_user, no_enqueue):
    """Another user's real session, approval and run are 404, like missing ones, and
    nothing of theirs changes."""
    s, run_id, approval_id = parked_gate(other_user)
    c = client_for(user)
    assert c.get(f"/api/sessions/{s.id}/").status_code == 404
    assert c.get(f"/api/sessions/{s.id}/events/").status_code == 404
    assert c.get("/api/sessions/s_nope/").status_code == 404
    for target in (approval_id, "ap_x"):
        decide = c.post(
            f"/api/approvals/{target}/decide/",
            {"decision": "approve"},
            content_type="application/json",
        )
        assert decide.status_code == 404
    assert c.post(f"/api/runs/{run_id}/cancel/").status_code == 404
    assert c.post("/api/runs/run_x/cancel/").status_code == 404
    assert c.get(f"/s/{s.id}/").status_code == 404
    assert ApprovalRequest.objects.get(id=approval_id).status == "pending"
    assert Run.objects.get(id=run_id).status == "awaiting_approval"


def test_decide_through_the_api_then_409_with_the_standing_decision(client_for, user, no_enqueue):
    """The owner decides through the API (signed in: channel ``api``; with a
    key it is ``api_key``, tests/runtime/test_gates.py); a second decision
    is 409 naming the first."""
    _, run_id, approval_id = parked_gate(user)
    c = client_for(user)
    url = f"/api/approvals/{approval_id}/decide/"
    ok = c.post(url, {"decision": "deny"}, content_type="application/json")
    assert ok.status_code == 200
    assert ok.json() == {"approval_id": approval_id, "decision": "deny"}
    assert ApprovalRequest.objects.get(id=approval_id).decided_via == "api"
    again = c.post(url, {"decision": "approve"}, content_type="application/json")
    assert again.status_code == 409
    body = again.json()
    assert (body["code"], body["decision"], body["decided_by"]) == (
        "already_decided",
        "deny",
        "alice",
    )
    assert no_enqueue == [run_id, run_id]  # its start, and one continuation


def test_cancel_through_the_api_then_409(client_for, user, no_enqueue):
    """The owner cancels a running run (200); cancelling it again is 409 not_pending."""
    s = create_session(user)
    from sessions_app.runtime import turns

    sent = turns.submit_message(s.id, "m1", "/stream 5 0")
    c = client_for(user)
    ok = c.post(f"/api/runs/{sent.run_id}/cancel/")
    assert ok.status_code == 200 and ok.json() == {"run_id": sent.run_id}
    assert Run.objects.get(id=sent.run_id).stop_reason == "cancelled"
    again = c.post(f"/api/runs/{sent.run_id}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "not_pending"


def test_session_list_is_paginated_with_next_links(client_for, user):
    """More sessions than a page: every one is reachable through the next links, once."""
    made = {create_session(user, f"t{i}").id for i in range(120)}
    c = client_for(user)
    seen: list[str] = []
    url = "/api/sessions/"
    while url:
        page = c.get(url).json()
        assert page["count"] == 120
        seen += [s["id"] for s in page["results"]]
        url = page["next"]
    assert len(seen) == 120 and set(seen) == made


def test_decision_is_validated(client_for, user):
    """A decision other than approve/deny is a 400 with the field named."""
    r = client_for(user).post(
        "/api/approvals/ap_x/decide/", {"decision": "maybe"}, content_type="application/json"
    )
    assert r.status_code == 400 and "decision" in r.json()


def test_pages_render(client_for, user):
    """The list shows the user's sessions; a session page carries its id for the client."""
    s = create_session(user, "Planning")
    c = client_for(user)
    page = c.get("/").content.decode()
    assert 'data-testid="new-session"' in page and s.id in page and "Planning" in page
    session_page = c.get(f"/s/{s.id}/").content.decode()
    assert s.id in session_page and 'data-testid="transcript"' in session_page


def test_session_page_preloads_every_client_module(client_for, user):
    """Every module the client imports is preloaded at once (no import waterfall)."""
    import re
    from pathlib import Path

    s = create_session(user)
    page = client_for(user).get(f"/s/{s.id}/").content.decode()
    static = r'rel="modulepreload" href="/static/sessions_app/'
    preloaded = set(re.findall(static + r'js/([\w/-]+\.js)"', page))
    js = Path(__file__).resolve().parents[2] / "static" / "sessions_app" / "js"
    modules = {p.relative_to(js).as_posix() for p in js.rglob("*.js")}
    assert preloaded == modules - {"app.js", "boot.js", "list.js", "view/highlight.js"}
    # So are the vendored libraries the Markdown renderer imports; not the
    # highlighter's (loaded with the first code block).
    markdown = (js / "view" / "markdown.js").read_text()
    vendored = set(re.findall(r'from "\.\./\.\./(vendor/[\w./-]+)"', markdown))
    assert vendored == {"vendor/marked/marked.esm.js"}
    assert vendored == set(re.findall(static + r'(vendor/[\w./-]+)"', page))
    assert 'import("./highlight.js")' in markdown
    # The boot script (reloads a page whose files failed) is inline, before
    # them, and allowed by its hash only.
    from sessions_app.server.security import BOOT_JS, BOOT_JS_HASH

    assert page.index(f"<script>{BOOT_JS}</script>") < page.index('rel="modulepreload"')
    csp = client_for(user).get(f"/s/{s.id}/")["Content-Security-Policy"]
    assert f"script-src 'self' 'sha256-{BOOT_JS_HASH}';" in csp


def test_new_session_form_needs_csrf(client_for, user):
    """The New session form is a CSRF-protected POST that redirects to the session."""
    assert client_for(user, csrf=True).post("/sessions/new/").status_code == 403
    r = client_for(user).post("/sessions/new/")
    s = AgentSession.objects.get(owner=user)
    assert r.status_code == 302 and r["Location"] == f"/s/{s.id}/"


def test_pages_carry_a_strict_content_security_policy(client_for, user):
    """The app's pages allow same-origin scripts, styles and sockets only."""
    s = create_session(user)
    for url in ("/", f"/s/{s.id}/", "/accounts/login/"):
        csp = client_for(user).get(url)["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "default-src 'self'" in csp
        assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp


# --- messages, tokens, the schema ------------------------------------------------


def test_post_a_message_is_the_sockets_send(client_for, user, no_enqueue):
    """POST messages/ logs a user.message and starts its run (201); the same id
    again is the first result with status duplicate (200) and appends nothing."""
    s = create_session(user)
    c = client_for(user)
    url = f"/api/sessions/{s.id}/messages/"
    body = {"client_message_id": "m-1", "text": "hello"}
    first = c.post(url, body, content_type="application/json")
    assert first.status_code == 201, first.content
    sent = first.json()
    assert (sent["client_message_id"], sent["seq"], sent["status"]) == ("m-1", 2, "started")
    again = c.post(url, {**body, "text": "other text"}, content_type="application/json")
    assert again.status_code == 200
    assert again.json() == {**sent, "status": "duplicate"}
    events = c.get(f"/api/sessions/{s.id}/events/").json()["events"]
    assert [e["kind"] for e in events] == ["session.created", "user.message", "run.started"]
    assert events[1]["data"] == {"client_message_id": "m-1", "text": "hello"}
    assert Run.objects.get(session=s).id == sent["run_id"]


@pytest.mark.parametrize(
    "body, code",
    [
        ({"client_message_id": "m", "text": "   "}, "bad_frame"),
        ({"client_message_id": "m", "text": "a\u0000b"}, "bad_frame"),
        ({"client_message_id": "m", "text": 5}, "bad_frame"),
        ({"client_message_id": "m", "text": "hi", "interrupt": "yes"}, "bad_frame"),
        ({"text": "no id"}, "bad_frame"),
        ({"client_message_id": "x" * 129, "text": "long id"}, "bad_frame"),
        ({"client_message_id": "m", "text": "x" * 32_001}, "too_large"),
    ],
)
def test_a_bad_message_is_refused_with_the_sockets_code(client_for, user, body, code):
    """The API refuses what the socket refuses, with the same error code; nothing is logged."""
    s = create_session(user)
    r = client_for(user).post(
        f"/api/sessions/{s.id}/messages/", body, content_type="application/json"
    )
    assert r.status_code == 400 and r.json()["code"] == code, r.content
    assert AgentSession.objects.get(id=s.id).head == 1


def test_stop_and_send_over_rest(client_for, user, no_enqueue):
    """ "interrupt": true on POST messages/ cancels the active run (its
    run.finished says why) and starts this input at once; the input queued
    before it stays queued."""
    s = create_session(user)
    c = client_for(user)
    url = f"/api/sessions/{s.id}/messages/"
    first = c.post(url, {"client_message_id": "m1", "text": "one"}, content_type="application/json")
    queued = c.post(
        url, {"client_message_id": "m2", "text": "two"}, content_type="application/json"
    )
    assert (first.json()["status"], queued.json()["status"]) == ("started", "queued")
    now = c.post(
        url,
        {"client_message_id": "m3", "text": "three", "interrupt": True},
        content_type="application/json",
    )
    assert now.status_code == 201 and now.json()["status"] == "started", now.content
    runs = {r.client_message_id: r for r in Run.objects.filter(session=s)}
    assert (runs["m1"].status, runs["m1"].stop_reason) == ("finished", "cancelled")
    assert runs["m2"].status == "queued" and runs["m3"].status == "running"
    events = c.get(f"/api/sessions/{s.id}/events/").json()["events"]
    finished = [e for e in events if e["kind"] == "run.finished"]
    assert [(e["run_id"], e["data"]) for e in finished] == [
        (runs["m1"].id, {"stop_reason": "cancelled", "message": "stopped for a newer message"})
    ]


def test_messages_to_another_users_session_are_not_found(client_for, user, other_user):
    """Another user's session is 404, as one that does not exist."""
    theirs = create_session(other_user)
    body = {"client_message_id": "m", "text": "hi"}
    r = client_for(user).post(
        f"/api/sessions/{theirs.id}/messages/", body, content_type="application/json"
    )
    assert r.status_code == 404 and AgentSession.objects.get(id=theirs.id).head == 1


def test_token_authentication_for_programs(user, no_enqueue):
    """A token in the Authorization header authenticates (no cookie, no CSRF); a
    wrong token is refused."""
    from tests.harness import api_key

    key = api_key(user)
    c = Client(enforce_csrf_checks=True)
    made = c.post(
        "/api/sessions/",
        {"title": "from a script"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert made.status_code == 201
    bad = c.get("/api/sessions/", HTTP_AUTHORIZATION="Token nope")
    assert bad.status_code == 403
    assert bad.json()["detail"] == "invalid, expired or revoked token"


def test_the_openapi_schema_matches_the_views(client_for, user, tmp_path):
    """drf-spectacular generates the schema with no warning and it validates; it
    documents every route, the messages endpoint with its request and responses;
    the docs page is served under the site's strict CSP."""
    from django.core.management import call_command

    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    c = client_for(user)
    schema = c.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert set(paths) == {
        "/api/sessions/",
        "/api/sessions/{session_id}/",
        "/api/sessions/{session_id}/events/",
        "/api/sessions/{session_id}/messages/",
        "/api/sessions/{session_id}/tree/",
        "/api/sessions/{session_id}/stream/",
        "/api/sessions/{session_id}/branch/",
        "/api/approvals/{approval_id}/decide/",
        "/api/runs/{run_id}/cancel/",
        "/api/tokens/",
        "/api/tokens/{id}/",
    }
    post = paths["/api/sessions/{session_id}/messages/"]["post"]
    assert set(post["responses"]) >= {"200", "201", "400", "404"}
    assert {"cookieAuth", "tokenAuth"} <= {k for s in post["security"] for k in s}
    docs = c.get("/api/docs/")
    assert docs.status_code == 200 and "script-src 'self'" in docs["Content-Security-Policy"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_posts_append_once(server, user):
    """Eight programs post the same client_message_id at once to the live server
    (token auth): one is appended and started, seven get the same result as
    duplicate; the log holds one user.message and one run."""
    import json
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from tests.harness import api_key

    s = create_session(user)
    token = api_key(user)
    body = json.dumps({"client_message_id": "m-same", "text": "/stream 3 0"}).encode()

    def post(_):
        req = urllib.request.Request(
            f"{server.http}/api/sessions/{s.id}/messages/",
            data=body,
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(post, range(8)))
    statuses = sorted(code for code, _ in results)
    assert statuses == [200] * 7 + [201]
    assert len({(b["seq"], b["run_id"]) for _, b in results}) == 1
    assert sorted(b["status"] for _, b in results) == ["duplicate"] * 7 + ["started"]
    kinds = list(
        Event.objects.filter(session=s, kind="user.message").values_list("data", flat=True)
    )
    assert len(kinds) == 1 and Run.objects.filter(session=s).count() == 1


# --- limits: throttles, queued runs, the docs -----------------------------------


def test_messages_past_the_send_rate_are_refused_429(client_for, user, settings, no_enqueue):
    """Past AGENT_API_SEND_RATE a user's POSTs get 429 with Retry-After and
    append nothing; reads stay under the general rate only."""
    from django.core.cache import cache

    cache.clear()
    settings.AGENT_API_SEND_RATE = "5/minute"
    settings.AGENT_USER_MAX_QUEUED_RUNS = 100
    s = create_session(user)
    c = client_for(user)
    url = f"/api/sessions/{s.id}/messages/"
    codes = [
        c.post(url, {"client_message_id": f"m{i}", "text": "hi"}, "application/json").status_code
        for i in range(8)
    ]
    assert codes == [201] * 5 + [429] * 3
    refused = c.post(url, {"client_message_id": "m9", "text": "hi"}, "application/json")
    assert int(refused["Retry-After"]) > 0
    assert refused.json()["code"] == "throttled" and refused.json()["retry_after"] > 0
    assert Run.objects.filter(session=s).count() == 5
    assert c.get(f"/api/sessions/{s.id}/events/").status_code == 200
    cache.clear()


def test_every_api_request_is_under_the_general_rate(client_for, user, settings):
    """AGENT_API_RATE bounds every request of a user, reads included."""
    from django.core.cache import cache

    cache.clear()
    settings.AGENT_API_RATE = "3/minute"
    c = client_for(user)
    assert [c.get("/api/sessions/").status_code for _ in range(4)] == [200, 200, 200, 429]
    cache.clear()


def test_queued_runs_per_user_are_limited(client_for, user, settings, no_enqueue):
    """Past AGENT_USER_MAX_QUEUED_RUNS runs waiting to start (across the
    user's sessions), a send is refused 429 ``too_many_runs``, logging nothing;
    a run that starts at once is not counted."""
    from django.core.cache import cache

    cache.clear()
    settings.AGENT_USER_MAX_QUEUED_RUNS = 2
    s = create_session(user)
    c = client_for(user)
    url = f"/api/sessions/{s.id}/messages/"
    statuses = []
    for i in range(3):
        r = c.post(url, {"client_message_id": f"q{i}", "text": "hi"}, "application/json")
        statuses.append((r.status_code, r.json()["status"]))
    assert statuses == [(201, "started"), (201, "queued"), (201, "queued")]
    before = Event.objects.filter(session=s).count()
    refused = c.post(url, {"client_message_id": "q3", "text": "hi"}, "application/json")
    assert refused.status_code == 429 and refused.json()["code"] == "too_many_runs"
    assert Event.objects.filter(session=s).count() == before
    cache.clear()


@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/"])
def test_the_schema_and_docs_need_a_sign_in_unless_opened(client, client_for, user, settings, path):
    """Anonymous requests for the schema or its docs are refused; a signed-in
    user gets them; AGENT_PUBLIC_API_DOCS opens them to everyone."""
    assert client.get(path).status_code in (401, 403)
    assert client_for(user).get(path).status_code == 200
    settings.AGENT_PUBLIC_API_DOCS = True
    assert client.get(path).status_code == 200


def test_the_list_page_says_when_it_is_cut_short(client_for, user):
    """Past MAX_LISTED sessions the page shows the most recent ones and says
    the rest are not shown; with fewer the note stays hidden."""
    from sessions_app.log.sessions import MAX_LISTED

    c = client_for(user)
    create_session(user)
    page = c.get("/").content.decode()
    assert 'data-testid="list-truncated"' in page
    assert 'data-testid="list-truncated" data-max="200" hidden' in page
    AgentSession.objects.bulk_create(AgentSession(owner=user) for _ in range(MAX_LISTED))
    page = c.get("/").content.decode()
    assert page.count('data-testid="session-link"') == MAX_LISTED
    assert 'data-max="200">' in page


class _HintlessAgent:
    def start(self, ctx): ...

    def resume(self, ctx, outcome): ...


class _HintedAgent(_HintlessAgent):
    hints = ["Save this: <b>milk</b>"]


def test_the_composer_hints_are_the_agents_own(client_for, user, settings):
    """The scripted agent's hints show under the composer; an agent without
    hints gets none (no /stream offered to a model), one with its own gets
    them, escaped."""
    from sessions_app.log.sessions import create_session

    s = create_session(user)
    c = client_for(user)
    page = c.get(f"/s/{s.id}/").content.decode()
    assert "Try <code>/stream 20 50</code>, <code>/write notes.txt hello</code>" in page
    settings.AGENT_CLASS = f"{__name__}._HintlessAgent"
    page = c.get(f"/s/{s.id}/").content.decode()
    assert "Enter sends, Shift+Enter adds a line.</p>" in page and "/stream" not in page
    settings.AGENT_CLASS = f"{__name__}._HintedAgent"
    page = c.get(f"/s/{s.id}/").content.decode()
    assert "Try <code>Save this: &lt;b&gt;milk&lt;/b&gt;</code>." in page
