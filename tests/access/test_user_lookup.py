"""``sessions_app.access.user_lookup``: the same user as Channels' ``get_user``, from
plain reads, in every case a session cookie can be in."""

from __future__ import annotations

import pytest
from channels.auth import get_user
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.backends.db import SessionStore as OrmStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.access.user_lookup import SessionStore, lookup_user
from tests.harness import session_cookie


def _key(cookie: str) -> str:
    return cookie.split("=", 1)[1]


def _both(ours_key: str | None, their_key: str | None):
    """(ours, Channels'), each for its own session key (a lookup may flush its
    session, so each side gets one of two sessions of the same state)."""
    return (
        lookup_user({"session": SessionStore(ours_key)}),
        get_user.func({"session": OrmStore(their_key)}),
    )


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("looked-up", password="pw")


def _same(ours, theirs):
    assert type(ours) is type(theirs)
    assert ours.pk == theirs.pk
    if ours.pk is not None:
        assert ours.__dict__.keys() - {"_state"} == theirs.__dict__.keys() - {"_state"}
        for name in ours.__dict__.keys() - {"_state"}:
            assert getattr(ours, name) == getattr(theirs, name), name


def test_a_signed_in_cookie_gives_its_user_in_two_reads(user):
    """The cookie's user, field for field what Channels finds, read with two queries."""
    key = _key(session_cookie(user))
    with CaptureQueriesContext(connection) as queries:
        ours = lookup_user({"session": SessionStore(key)})
    assert len(queries) == 2
    _same(ours, get_user.func({"session": OrmStore(key)}))
    assert ours == user and ours.is_authenticated


@pytest.mark.parametrize(
    "case", ["no_cookie", "unknown_key", "expired", "inactive", "deleted", "password_changed"]
)
def test_every_kind_of_bad_cookie_is_anonymous_as_with_channels(user, case):
    """Unknown, expired, for an inactive or deleted user, or from before a password
    change: anonymous, as Channels' lookup says."""
    keys = [_key(session_cookie(user)), _key(session_cookie(user))]
    if case == "no_cookie":
        keys = [None, None]
    elif case == "unknown_key":
        keys = ["x" * 32, "y" * 32]
    elif case == "expired":
        Session.objects.filter(session_key__in=keys).update(expire_date="2000-01-01T00:00:00Z")
    elif case == "inactive":
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    elif case == "deleted":
        user.delete()
    elif case == "password_changed":
        user.set_password("other")
        user.save()
    ours, theirs = _both(*keys)
    assert isinstance(ours, AnonymousUser) and isinstance(theirs, AnonymousUser)


def test_a_session_from_before_a_password_change_is_flushed(user):
    """As with Channels: a session whose hash no longer matches is deleted."""
    key = _key(session_cookie(user))
    user.set_password("other")
    user.save()
    assert isinstance(lookup_user({"session": SessionStore(key)}), AnonymousUser)
    assert not Session.objects.filter(session_key=key).exists()
