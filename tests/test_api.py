"""REST API and pages: ownership, CSRF, validation."""

from __future__ import annotations

import pytest
from django.test import Client

from sessions_app.events import append_event
from sessions_app.models import AgentSession
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
    assert [s["title"] for s in listed] == ["mine"]


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


def test_other_users_objects_are_404(client_for, user, other_user):
    """Another user's session, approval or run is 404, like a missing one."""
    s = create_session(other_user)
    c = client_for(user)
    assert c.get(f"/api/sessions/{s.id}/").status_code == 404
    assert c.get(f"/api/sessions/{s.id}/events/").status_code == 404
    assert c.get("/api/sessions/s_nope/").status_code == 404
    decide = c.post(
        "/api/approvals/ap_x/decide/", {"decision": "approve"}, content_type="application/json"
    )
    assert decide.status_code == 404
    assert c.post("/api/runs/run_x/cancel/").status_code == 404
    assert c.get(f"/s/{s.id}/").status_code == 404


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
