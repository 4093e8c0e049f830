"""Signing out closes the sockets of that session cookie (4401, the client
shows "Signed out" and does not retry); other browsers' sockets stay."""

from __future__ import annotations

import asyncio
import http.cookiejar
import re
import urllib.parse
import urllib.request

from channels.db import database_sync_to_async

from tests.harness import WsClient, session_cookie


def _logout(server, cookie: str) -> int:
    """Sign out through the site's own logout view (a form POST with CSRF)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(urllib.request.Request(server.http + "/accounts/login/")).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    csrf = next(c.value for c in jar if c.name == "csrftoken")
    request = urllib.request.Request(
        server.http + "/accounts/logout/",
        data=urllib.parse.urlencode({"csrfmiddlewaretoken": token}).encode(),
        headers={"Cookie": f"{cookie}; csrftoken={csrf}"},
        method="POST",
    )

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        return urllib.request.build_opener(NoRedirect).open(request).status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_a_logout_closes_that_cookies_sockets_only(server, cookie, user):
    """After a logout, the session and list sockets of that cookie are closed
    with 4401 and a new socket with it is refused; the same user's sockets
    from another browser (another cookie) are still live."""
    other_browser = await database_sync_to_async(session_cookie)(user)
    tab = await WsClient.connect(server.ws, cookie)
    sid = (await tab.start())["session_id"]
    lister = await WsClient.connect(server.ws.replace("/ws/sessions/", "/ws/list/"), cookie)
    await lister.wait(lambda f: f.get("type") == "sessions")
    elsewhere = await WsClient.connect(server.ws, other_browser)
    await elsewhere.resume(sid, 0)

    assert await database_sync_to_async(_logout)(server, cookie) == 302
    for ws in (tab, lister):
        await asyncio.wait_for(ws._reader, 20)
        assert ws.closed_code == 4401
    again = await WsClient.connect(server.ws, cookie)
    await asyncio.wait_for(again._reader, 20)
    assert again.closed_code == 4401

    pong = await elsewhere.request({"type": "ping"})
    assert pong["type"] == "pong"
    await elsewhere.close()
