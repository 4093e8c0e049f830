"""When a user's rights end, their open sockets and tokens lose them too.

A user is let in once, when a socket opens (the cookie's user) or a request
arrives (the cookie or the token). Three changes end those rights: the user
is deactivated, deleted, or their password changes (Django then refuses every
other session of theirs, as its session hash no longer matches). On each:

- every socket of the user, in every browser and on every server, is closed
  4403 (``fanout.rights_group``, published after the change commits). 4403
  is retryable: the next upgrade's lookup lets in a cookie that still signs in
  (the browser where the password was changed keeps its tabs) and refuses the
  others 4401;
- every command a socket sends (``send``, ``decide``, ``cancel``) is checked
  against the rights it was let in with (``still_granted``, one indexed read),
  so a change whose message did not reach a socket (a command run beside the
  embedded server, a lost publication) still stops it from acting;
- a password change or a deactivation revokes the user's API tokens
  (``access.tokens``): a token is a credential as the password is, and a new
  one is made on request (a re-hash of the same password at sign-in keeps
  them).

Only saves are seen: ``QuerySet.update`` sends no signal, so a bulk change
closes no socket and keeps tokens (commands are still refused, by the read
above; close sockets with ``revoke(user_id)``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_save

from sessions_app import fanout
from sessions_app.access.tokens import revoke as revoke_tokens
from sessions_app.models import ApiToken
from sessions_app.wire.errors import SessionError

_WATCHED = {"is_active", "password"}


class RightsRevoked(SessionError):
    """The user this socket was let in as was deactivated, deleted, or their
    password changed."""

    code = "rights_revoked"
    status = 403
    message = "your sign-in is no longer valid: sign in again"


def connect_signals() -> None:
    user_model = get_user_model()
    pre_save.connect(_before_save, sender=user_model, dispatch_uid="sessions_app.rights.pre")
    post_save.connect(_after_save, sender=user_model, dispatch_uid="sessions_app.rights.post")
    post_delete.connect(_deleted, sender=user_model, dispatch_uid="sessions_app.rights.delete")


def _fields(model) -> set[str]:
    return {f.attname for f in model._meta.concrete_fields} & _WATCHED


def _before_save(sender, instance, raw=False, update_fields=None, **kwargs: Any) -> None:
    watched = _fields(sender)
    if raw or instance.pk is None or not watched:
        return
    if update_fields is not None and not watched & set(update_fields):
        return  # e.g. last_login at every sign-in: no read
    instance._rights_before = (
        sender._default_manager.filter(pk=instance.pk).values(*watched).first()
    )


def _after_save(sender, instance, created, raw=False, update_fields=None, **kwargs: Any) -> None:
    before = instance.__dict__.pop("_rights_before", None)
    if created or raw or before is None:
        return
    password_changed = "password" in before and before["password"] != instance.password
    deactivated = before.get("is_active", False) and not getattr(instance, "is_active", True)
    # Django re-hashes a password at sign-in when its hasher changed
    # (``check_password``: ``_password`` None, only the password saved). The
    # password is the same: tokens stay. (Other sessions' hashes no longer
    # match, so their sockets are still closed, as Django signs them out.)
    rehashed = (
        password_changed
        and update_fields is not None
        and set(update_fields) == {"password"}
        and getattr(instance, "_password", None) is None
    )
    if (password_changed and not rehashed) or deactivated:
        revoke_tokens(ApiToken.objects.filter(user_id=instance.pk))
    if password_changed or deactivated:
        revoke(instance.pk)


def _deleted(sender, instance, **kwargs: Any) -> None:
    revoke(instance.pk)


def revoke(user_id: int) -> None:
    """Close every socket of the user (4403) once the current transaction commits."""
    transaction.on_commit(lambda: fanout.publish_revoked(user_id), robust=True)


def still_granted(granted: tuple[int, str]) -> bool:
    """Does the user a socket was let in as (``(pk, password hash)``) still
    have the rights it was let in with? One indexed read."""
    user_id, password = granted
    model = get_user_model()
    rows = model._default_manager.filter(pk=user_id)
    watched = _fields(model)
    if "is_active" in watched:
        rows = rows.filter(is_active=True)
    if "password" in watched:
        rows = rows.filter(password=password)
    return rows.exists()


def require(granted: tuple[int, str]) -> None:
    """``RightsRevoked`` unless ``still_granted``."""
    if not still_granted(granted):
        raise RightsRevoked()
