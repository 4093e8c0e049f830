"""A user's rights end everywhere at once (``sessions_app.access.rights``): after a
deactivation or a password change no open socket keeps them, no command of
theirs is carried out, and no token of theirs works."""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.parse
import urllib.request

from channels.db import database_sync_to_async

from sessions_app.models import Event
from sessions_app.runtime.tools import workspace_for
from tests.harness import WsClient, api_key, key_works, session_cookie


def _change_password(server, cookie: str, old: str, new: str) -> tuple[int, str]:
    """Change the password through the site's own view (a form POST with CSRF);
    the status and the browser's cookie after it (Django gives the session a
    new key)."""
    opener = urllib.request.build_opener()
    opener.addheaders = [("Cookie", cookie)]
    page = opener.open(server.http + "/accounts/password_change/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    opener.addheaders = [
        ("Cookie", f"{cookie}; csrftoken={token}"),
        ("Referer", server.http + "/accounts/password_change/"),
    ]
    body = urllib.parse.urlencode(
        {
            "csrfmiddlewaretoken": token,
            "old_password": old,
            "new_password1": new,
            "new_password2": new,
        }
    ).encode()
    try:
        response = opener.open(server.http + "/accounts/password_change/", body)
    except urllib.error.HTTPError as exc:
        response = exc
    name = cookie.split("=", 1)[0]
    renewed = cookie
    for header in response.headers.get_all("Set-Cookie") or []:
        if header.startswith(name + "="):
            renewed = header.split(";", 1)[0]
    return response.status if hasattr(response, "status") else response.code, renewed


async def _closed_with(ws: WsClient) -> int:
    return await ws.wait_closed(timeout=20)


async def test_a_password_change_closes_the_users_sockets_in_every_browser(server, cookie, user):
    """The session and list sockets of both of the user's browsers are closed
    4403 (retryable). Coming back, the browser where the password was changed
    is let in again; the other browser's cookie no longer signs in (4401); the
    user's API key was revoked."""
    other_browser = await database_sync_to_async(session_cookie)(user)
    token = await database_sync_to_async(api_key)(user)
    lists = server.ws.replace("/ws/sessions/", "/ws/list/")
    here = await WsClient.connect(server.ws, cookie)
    sid = (await here.start())["session_id"]
    there = await WsClient.connect(server.ws, other_browser)
    await there.resume(sid, 0)
    listers = [await WsClient.connect(lists, c) for c in (cookie, other_browser)]
    for lister in listers:
        await lister.wait(lambda f: f.get("type") == "sessions")

    status, renewed = await asyncio.to_thread(
        _change_password, server, cookie, "alice-pass-1", "a-new-pass-2024"
    )
    assert status == 302  # to the "done" page
    for ws in (here, there, *listers):
        assert await _closed_with(ws) == 4403

    assert renewed != cookie, "the session key was not renewed"
    back = await WsClient.connect(server.ws, renewed)
    ok = await back.resume(sid, 0)
    assert ok["type"] == "resume_ok"
    await back.close()
    refused = await WsClient.connect(server.ws, other_browser)
    assert await _closed_with(refused) == 4401
    assert not await database_sync_to_async(key_works)(token)


async def test_a_deactivated_users_socket_cannot_approve_and_the_tool_never_runs(
    server, cookie, user
):
    """An open socket of a user deactivated meanwhile (here by a direct
    database change, whose message may reach no server) sends an approval:
    it is refused (``rights_revoked``), the socket is closed 4403, the tool
    never runs, and a new socket with the cookie is refused 4401."""
    ws = await WsClient.connect(server.ws, cookie)
    sid = (await ws.start())["session_id"]
    sent = await ws.request({"type": "send", "client_message_id": "m1", "text": "/write s.txt x"})
    assert sent["type"] == "send_ok"
    asked = await ws.wait_event(lambda f: f["kind"] == "approval.requested")

    user.is_active = False
    await database_sync_to_async(user.save)()
    try:
        reply = await ws.request(
            {
                "type": "decide",
                "approval_id": asked["data"]["approval_id"],
                "decision": "approve",
                "request_id": ws.rid(),
            }
        )
        assert reply["type"] == "error" and reply["code"] == "rights_revoked", reply
    except Exception as exc:  # closed by the revocation's push before the request
        assert ws.closed_code == 4403, exc
    assert await _closed_with(ws) == 4403

    again = await WsClient.connect(server.ws, cookie)
    assert await _closed_with(again) == 4401
    assert not (workspace_for(sid) / "s.txt").exists()
    kinds = await database_sync_to_async(
        lambda: list(Event.objects.filter(session_id=sid).values_list("kind", flat=True))
    )()
    assert "tool.result" not in kinds and "approval.decided" not in kinds


def test_a_password_change_revokes_the_users_tokens(user, other_user):
    """A token is a credential like the password: a new password revokes the
    user's tokens (another user's stay), and so does a deactivation."""
    mine = api_key(user)
    theirs = api_key(other_user)
    user.set_password("another-pass-99")
    user.save()
    assert not key_works(mine)
    assert key_works(theirs)
    other_user.is_active = False
    other_user.save()
    assert not key_works(theirs)
    other_user.is_active = True
    other_user.save()
    assert not key_works(theirs)  # revoked, not merely refused while inactive


def test_saving_other_fields_keeps_tokens_and_reads_nothing(
    user, django_assert_num_queries, transactional_db
):
    """A sign-in's ``last_login`` update (update_fields) costs no extra read
    and revokes nothing."""
    token = api_key(user)
    with django_assert_num_queries(1):
        user.save(update_fields=["last_login"])
    user.first_name = "Alice"
    user.save()
    assert key_works(token)


def test_still_granted_follows_the_users_rights(user, transactional_db):
    """A socket's rights (pk, password hash) hold until the user is
    deactivated, their password changes, or they are deleted."""
    from sessions_app.access.rights import still_granted

    granted = (user.pk, user.password)
    assert still_granted(granted)
    user.set_password("changed-pass-77")
    user.save()
    assert not still_granted(granted)
    granted = (user.pk, user.password)
    user.is_active = False
    user.save()
    assert not still_granted(granted)


def test_a_rehash_at_sign_in_keeps_tokens(user, settings):
    """Django re-hashes a password at sign-in when its hasher changed: the
    same password, so the user's tokens stay."""
    from django.contrib.auth import authenticate
    from django.contrib.auth.hashers import make_password

    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.MD5PasswordHasher",
    ]
    user.password = make_password("alice-pass-1", hasher="md5")
    user.save()
    token = api_key(user)
    assert authenticate(username="alice", password="alice-pass-1") is not None
    user.refresh_from_db()
    assert user.password.startswith("pbkdf2_")  # it was re-hashed
    assert key_works(token)
