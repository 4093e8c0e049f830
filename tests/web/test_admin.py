"""The admin: deciding and cancelling need the change permission, not view."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from sessions_app.log.sessions import create_session
from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime import turns

pytestmark = pytest.mark.django_db(transaction=True)


def _staff(django_user_model, name: str, *codenames: str):
    user = django_user_model.objects.create_user(name, password=f"{name}-pass-1", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def _parked(user) -> tuple[Run, ApprovalRequest]:
    from tests.web.test_api import parked_gate

    _, run_id, approval_id = parked_gate(user)
    return Run.objects.get(id=run_id), ApprovalRequest.objects.get(id=approval_id)


def _action(client, model: str, action: str, pk: str):
    return client.post(
        f"/admin/sessions_app/{model}/",
        {"action": action, "_selected_action": [pk], "index": 0},
    )


@pytest.mark.parametrize("action", ["approve", "deny"])
def test_view_only_staff_cannot_decide(user, django_user_model, no_enqueue, action):
    """A staff user with view permission only: the action is refused, the gate stays pending."""
    _, approval = _parked(user)
    viewer = _staff(django_user_model, "viewer", "view_approvalrequest")
    page = viewer.get("/admin/sessions_app/approvalrequest/")
    assert page.status_code == 200 and b'value="approve"' not in page.content
    _action(viewer, "approvalrequest", action, approval.id)
    assert ApprovalRequest.objects.get(id=approval.id).status == "pending"


def test_staff_with_change_permission_decides(user, django_user_model, no_enqueue):
    """With the change permission the admin action decides the gate, as that user."""
    _, approval = _parked(user)
    editor = _staff(django_user_model, "editor", "view_approvalrequest", "change_approvalrequest")
    _action(editor, "approvalrequest", "approve", approval.id)
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("approved", "editor")
    assert approval.decided_via == "admin"


def test_the_gate_list_is_an_audit_filtered_by_kind_channel_and_status(
    user, django_user_model, no_enqueue
):
    """The list shows each gate's kind, decider, channel and reason, and
    filters by them."""
    _, approval = _parked(user)
    editor = _staff(django_user_model, "editor", "view_approvalrequest", "change_approvalrequest")
    _action(editor, "approvalrequest", "deny", approval.id)
    listed = editor.get(
        "/admin/sessions_app/approvalrequest/?decided_via__exact=admin&kind=approval"
    )
    assert listed.status_code == 200 and approval.id.encode() in listed.content
    for column in (b"column-kind", b"column-decided_via", b"column-reason"):
        assert column in listed.content
    other = editor.get("/admin/sessions_app/approvalrequest/?decided_via__exact=tab")
    assert other.status_code == 200 and approval.id.encode() not in other.content


def test_the_admin_cannot_approve_a_gate_closed_with_its_branch(
    user, django_user_model, no_enqueue
):
    """A gate whose branch was left (its message edited) is refused in the
    admin too, with its reason; it stays cancelled and nothing is enqueued."""
    run, approval = _parked(user)
    turns.edit(run.session_id, "e1", run.id, "hello instead", by="alice")
    enqueued = list(no_enqueue)
    editor = _staff(django_user_model, "editor", "view_approvalrequest", "change_approvalrequest")
    page = _action(editor, "approvalrequest", "approve", approval.id)
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("cancelled", "alice")
    assert no_enqueue == enqueued
    shown = editor.get(page["Location"]).content.decode()
    assert "this approval was cancelled: the conversation moved to another branch" in shown


def test_the_admin_cannot_approve_a_form_that_needs_typing(user, django_user_model, no_enqueue):
    """A question whose form has required fields without defaults is
    answered on the session's page, not approved blind: the admin says why,
    and it stays pending."""
    from sessions_app.runtime.agents.scripted import ASK_FORM
    from sessions_app.runtime.gates import Gate, Kind
    from sessions_app.runtime.questions import asked

    run, _approval = _parked(user)
    question = Gate("ask_form1", "ask_user", asked("Who?", ASK_FORM), kind=Kind.QUESTION)
    row = question.row(run.session_id, run.id)
    row.save()
    editor = _staff(django_user_model, "editor", "view_approvalrequest", "change_approvalrequest")
    page = _action(editor, "approvalrequest", "approve", row.id)
    assert ApprovalRequest.objects.get(id=row.id).status == "pending"
    shown = editor.get(page["Location"]).content.decode()
    assert "this question asks for typed fields: answer its form" in shown


def test_view_only_staff_cannot_cancel_runs(user, django_user_model, no_enqueue):
    """Cancel needs the run change permission; with view only the run goes on."""
    session = create_session(user)
    sent = turns.submit_message(session.id, "m1", "/stream 10 0")
    viewer = _staff(django_user_model, "viewer", "view_run")
    _action(viewer, "run", "cancel_runs", sent.run_id)
    assert Run.objects.get(id=sent.run_id).status == "running"
    editor = _staff(django_user_model, "editor", "view_run", "change_run")
    _action(editor, "run", "cancel_runs", sent.run_id)
    assert Run.objects.get(id=sent.run_id).stop_reason == "cancelled"


def test_rotating_an_epoch_needs_the_change_permission(user, django_user_model):
    """The rotate action is offered and works only with the session change permission."""
    from sessions_app.models import AgentSession

    session = create_session(user)
    viewer = _staff(django_user_model, "viewer", "view_agentsession")
    page = viewer.get("/admin/sessions_app/agentsession/")
    assert page.status_code == 200 and b'value="rotate_epochs"' not in page.content
    _action(viewer, "agentsession", "rotate_epochs", session.id)
    assert AgentSession.objects.get(id=session.id).epoch == session.epoch
    editor = _staff(django_user_model, "editor", "view_agentsession", "change_agentsession")
    _action(editor, "agentsession", "rotate_epochs", session.id)
    assert AgentSession.objects.get(id=session.id).epoch != session.epoch


def test_view_only_staff_cannot_read_api_tokens(user, django_user_model, admin_user):
    """Staff with the token view permission (the review's route to a
    superuser's token) get 403 on the list and on a token; the key's prefix
    appears nowhere in what they are served."""
    from sessions_app.access.tokens import issue

    token, key = issue(admin_user)
    staff = _staff(django_user_model, "viewer", "view_apitoken")
    for path in (
        "/admin/sessions_app/apitoken/",
        f"/admin/sessions_app/apitoken/{token.pk}/change/",
    ):
        response = staff.get(path)
        assert response.status_code == 403, path
        assert token.prefix not in response.content.decode()
    assert token.prefix not in staff.get("/admin/").content.decode()


def test_superusers_see_a_prefix_a_new_key_once_and_revoke(user, admin_client):
    """A superuser's list shows each key's prefix, never a key; a key made in
    the admin is shown whole once, then not, and it signs in; the revoke
    action refuses it from then on."""
    from sessions_app.access.tokens import issue
    from sessions_app.models import ApiToken
    from tests.harness import key_works

    token, key = issue(user)
    page = admin_client.get("/admin/sessions_app/apitoken/").content.decode()
    assert token.prefix in page and key not in page
    response = admin_client.post(
        "/admin/sessions_app/apitoken/add/", {"user": user.pk, "name": "ci", "days": 30}
    )
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    made = response.content.decode()
    new_key = next(
        w for w in made.replace("<", " <").replace(">", "> ").split() if w.startswith("ast_")
    )
    assert key_works(new_key)
    # Never in a cookie: the messages' cookie (the default storage) or any other.
    assert all(new_key not in morsel.value for morsel in response.cookies.values())
    assert all(new_key not in morsel.value for morsel in admin_client.cookies.values())
    again = admin_client.get("/admin/sessions_app/apitoken/").content.decode()
    assert new_key not in again
    chosen = list(ApiToken.objects.filter(user=user).values_list("pk", flat=True))
    admin_client.post(
        "/admin/sessions_app/apitoken/",
        {"action": "revoke_tokens", "_selected_action": chosen},
    )
    assert not key_works(new_key) and not key_works(key)


def test_a_users_delete_page_never_shows_their_token(user, django_user_model, admin_user):
    """Staff who may delete users see what a deletion takes with it, a token
    too, but only its prefix (a token's text), never the key."""
    from sessions_app.access.tokens import issue

    token, key = issue(admin_user)
    mine, my_key = issue(user)
    staff = _staff(django_user_model, "deleter", "view_user", "delete_user")
    for pk in (admin_user.pk, user.pk):
        page = staff.get(f"/admin/auth/user/{pk}/delete/").content.decode()
        assert "API token" in page
        assert key not in page and my_key not in page
    assert str(token).startswith(token.prefix + "…")
