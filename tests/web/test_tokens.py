"""API keys (sessions_app/web/tokens.py and sessions_app/access/tokens.py):
made by their user and shown once, listed without a key, revoked, expiring,
and unreadable from a copy of the database."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_user_makes_lists_and_revokes_their_own_keys(client_for, user, other_user):
    """POST /api/tokens/ answers with the key once; the list never shows a key;
    DELETE revokes (the key is refused from then on); another user's key is 404."""
    from tests.harness import api_key, key_works

    c = client_for(user)
    made = c.post("/api/tokens/", {"name": "ci", "days": 7}, content_type="application/json")
    assert made.status_code == 201, made.content
    key = made.json()["key"]
    assert key.startswith("ast_") and key_works(key)
    listed = c.get("/api/tokens/").json()
    assert [t["name"] for t in listed] == ["ci"] and key not in str(listed)
    theirs = api_key(other_user)
    from sessions_app.models import ApiToken

    other_id = ApiToken.objects.get(user=other_user).pk
    assert c.delete(f"/api/tokens/{other_id}/").status_code == 404
    assert key_works(theirs)
    assert c.delete(f"/api/tokens/{made.json()['id']}/").status_code == 204
    assert not key_works(key)
    bad = c.post("/api/tokens/", {"days": -1}, content_type="application/json")
    assert bad.status_code == 400


def test_a_key_expires_and_records_its_last_use(user):
    """A key past its expiry is refused; a key's use is recorded (to the minute)."""
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.access.tokens import issue, token_user
    from sessions_app.models import ApiToken

    token, key = issue(user, days=1)
    assert token_user(f"Token {key}") == (user, token.pk)
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert token_user(f"Token {key}") is None


@pytest.mark.django_db(transaction=True)
def test_a_key_is_unreadable_from_a_copy_of_the_database(user, tmp_path):
    """Everything the database holds, dumped as text, contains no key; the
    stored digest is not a key that signs in."""
    from django.core.management import call_command

    from sessions_app.models import ApiToken
    from tests.harness import api_key, key_works

    key = api_key(user)
    dump = tmp_path / "dump.json"
    call_command("dumpdata", "--output", str(dump))
    text = dump.read_text()
    assert key not in text and key[len("ast_") :] not in text
    stored = ApiToken.objects.get(user=user)
    assert not key_works(stored.digest) and not key_works(stored.prefix)


def test_a_key_cannot_make_or_revoke_keys_and_none_outlives_the_setting(client_for, user, settings):
    """/api/tokens/ takes the signed-in cookie only: a key (a leaked one
    included) cannot make itself a successor; a key asks for 1 to
    AGENT_TOKEN_DAYS days."""
    from django.test import Client

    from tests.harness import api_key

    key = api_key(user)
    with_key = Client(HTTP_AUTHORIZATION=f"Token {key}")
    made = with_key.post("/api/tokens/", {"days": 0}, content_type="application/json")
    assert made.status_code in (401, 403)
    settings.AGENT_TOKEN_DAYS = 30
    c = client_for(user)
    for days in (0, 31):
        refused = c.post("/api/tokens/", {"days": days}, content_type="application/json")
        assert refused.status_code == 400, days
    assert c.post("/api/tokens/", {"days": 30}, content_type="application/json").status_code == 201


def test_a_superuser_deletes_a_user_who_has_keys(admin_client, django_user_model):
    """Keys are revoked, not deleted, in the normal course; a user who has
    some can still be deleted by a superuser, keys and all."""
    from sessions_app.access.tokens import issue
    from sessions_app.models import ApiToken

    someone = django_user_model.objects.create_user("someone", password="x-pass-12345")
    issue(someone)
    page = admin_client.post(f"/admin/auth/user/{someone.pk}/delete/", {"post": "yes"})
    assert page.status_code == 302
    assert not django_user_model.objects.filter(pk=someone.pk).exists()
    assert not ApiToken.objects.filter(user_id=someone.pk).exists()
