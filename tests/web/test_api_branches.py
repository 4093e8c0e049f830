"""The REST API's conversation control (sessions_app/web/api.py over
runtime/turns.py): edit, regenerate, the tree, switching, and the gates left
behind."""

from __future__ import annotations

import pytest

from sessions_app.models import AgentSession, Event, Run
from tests.web.test_api import parked_gate

pytestmark = pytest.mark.django_db


def test_branches_over_rest_edit_tree_switch_and_a_cancelled_gate(
    client_for, user, other_user, no_enqueue
):
    """A program edits the message of a run parked at a gate (POST …/messages/
    with edit_of), reads the tree (GET …/tree/), regenerates and switches
    (POST …/branch/). The old gate is closed: deciding it through the API is
    409 approval_cancelled. Another user's session is 404 on both routes."""
    s, run_id, approval_id = parked_gate(user)
    c = client_for(user)
    url = f"/api/sessions/{s.id}/messages/"
    edited = c.post(
        url,
        {"client_message_id": "e1", "text": "hello", "edit_of": run_id},
        content_type="application/json",
    )
    assert edited.status_code == 201 and edited.json()["status"] == "started"
    new_run = edited.json()["run_id"]
    late = c.post(
        f"/api/approvals/{approval_id}/decide/",
        {"decision": "approve"},
        content_type="application/json",
    )
    assert late.status_code == 409 and late.json()["code"] == "approval_cancelled"
    tree = c.get(f"/api/sessions/{s.id}/tree/").json()
    assert tree["leaf_run_id"] == new_run and tree["path"] == [new_run]
    assert [(r["run_id"], r["status"]) for r in tree["runs"]] == [
        (run_id, "finished"),
        (new_run, "running"),
    ]
    Run.objects.filter(id=new_run).update(status="finished")
    again = c.post(
        url, {"client_message_id": "g1", "regenerate": new_run}, content_type="application/json"
    )
    assert again.status_code == 201
    with_text = c.post(
        url,
        {"client_message_id": "g2", "regenerate": new_run, "text": "x"},
        content_type="application/json",
    )
    assert with_text.status_code == 400 and with_text.json()["code"] == "bad_frame"
    switched = c.post(
        f"/api/sessions/{s.id}/branch/", {"run_id": run_id}, content_type="application/json"
    )
    assert switched.status_code == 200
    assert switched.json() == {"leaf_run_id": run_id, "path": [run_id]}
    assert AgentSession.objects.get(id=s.id).leaf_run_id == run_id
    assert Event.objects.filter(session_id=s.id, kind="branch.switched").count() == 1
    bad = c.post(f"/api/sessions/{s.id}/branch/", {"run_id": ""}, content_type="application/json")
    assert bad.status_code == 400
    theirs = client_for(other_user)
    assert theirs.get(f"/api/sessions/{s.id}/tree/").status_code == 404
    assert (
        theirs.post(
            f"/api/sessions/{s.id}/branch/", {"run_id": run_id}, content_type="application/json"
        ).status_code
        == 404
    )
