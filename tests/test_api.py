"""REST API and pages: ownership, CSRF, validation."""

from __future__ import annotations

import pytest
from django.test import Client

from sessions_app.events import append_event
from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.services import create_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_for():
    def make(user, csrf=False):
        c = Client(enforce_csrf_checks=csrf)
        c.force_login(user)
        return c

    return make


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
    from sessions_app.runtime import runs

    s = create_session(owner)
    sent = runs.submit_message(s.id, "m1", "/write a.txt x")
    Run.objects.filter(id=sent.run_id).update(worker="w")
    approval_id = runs.park(
        sent.run_id,
        "w",
        s.id,
        tool_call_id="call_" + s.id,
        tool="write_file",
        args={"path": "a.txt", "text": "x"},
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
    """The owner decides through the API; a second decision is 409 naming the first."""
    _, run_id, approval_id = parked_gate(user)
    c = client_for(user)
    url = f"/api/approvals/{approval_id}/decide/"
    ok = c.post(url, {"decision": "deny"}, content_type="application/json")
    assert ok.status_code == 200
    assert ok.json() == {"approval_id": approval_id, "decision": "deny"}
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
    from sessions_app.runtime import runs

    sent = runs.submit_message(s.id, "m1", "/stream 5 0")
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
