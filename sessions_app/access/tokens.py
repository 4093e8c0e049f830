"""API tokens, kept as hashes (``models.ApiToken``).

A key is ``ast_`` and 43 random URL-safe characters (256 bits), shown once
when it is made (``issue``); the database keeps its SHA-256 (a key this
random needs no slow hash: nothing can be guessed from the digest) and its
first 12 characters, to tell keys apart. A key expires after
``AGENT_TOKEN_DAYS`` days (0: never), records when it was last used (to the
minute) and can be revoked (``revoke``: in the admin, through the API, by
``manage.py revoke_tokens``, and all of a user's when their password changes
or they are deactivated); a revoked key's SSE streams end at once.

Why not a library: django-rest-knox keeps digests too, but has no last use
and no revocation record, and its auth is DRF's only, where the SSE stream
and the admin need the same check; this is one module (docs/api.md).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rest_framework import authentication, exceptions

from sessions_app import fanout
from sessions_app.models import ApiToken

KEYWORD = "Token"
PREFIX_CHARS = 12
# ``last_used_at`` is written at most this often per key: not a write per request.
LAST_USED_EVERY = timedelta(minutes=1)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def issue(user, name: str = "", days: int | None = None) -> tuple[ApiToken, str]:
    """A new key for ``user``: the row, and the key (shown once, kept nowhere)."""
    key = "ast_" + secrets.token_urlsafe(32)
    days = settings.AGENT_TOKEN_DAYS if days is None else days
    token = ApiToken.objects.create(
        user=user,
        name=name[:100],
        prefix=key[:PREFIX_CHARS],
        digest=digest(key),
        expires_at=timezone.now() + timedelta(days=days) if days else None,
    )
    return token, key


def key_of(header: str) -> str:
    """The key of an ``Authorization: Token <key>`` header ("" if none)."""
    parts = header.split()
    return parts[1] if len(parts) == 2 and parts[0].lower() == KEYWORD.lower() else ""


def names_a_key(header: str) -> bool:
    """Does an ``Authorization`` header name a key (``Token …``)? Such a
    request is the key's, whatever cookie it carries."""
    return header.lower().startswith(KEYWORD.lower() + " ")


def token_user(header: str):
    """``(user, token id)`` for a header with a live key of an active user, else None."""
    key = key_of(header)
    if not key or len(key) > 100:
        return None
    token = ApiToken.objects.select_related("user").filter(digest=digest(key)).first()
    now = timezone.now()
    if token is None or token.revoked_at is not None or not token.user.is_active:
        return None
    if token.expires_at is not None and token.expires_at <= now:
        return None
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user, token.pk


def revoke(tokens) -> int:
    """Revoke ``tokens`` (a queryset): refused from now on, and their streams
    end once this commits. Returns how many were live."""
    ids = list(tokens.filter(revoked_at__isnull=True).values_list("pk", flat=True))
    ApiToken.objects.filter(pk__in=ids).update(revoked_at=timezone.now())
    for token_id in ids:
        transaction.on_commit(
            lambda token_id=token_id: fanout.publish_token_revoked(token_id), robust=True
        )
    return len(ids)


class TokenAuthentication(authentication.BaseAuthentication):
    """DRF's authentication by ``Authorization: Token <key>``, on these keys."""

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not names_a_key(header):
            return None
        found = token_user(header)
        if found is None:
            raise exceptions.AuthenticationFailed("invalid, expired or revoked token")
        return found

    def authenticate_header(self, request) -> str:
        return KEYWORD
