"""The clients the tests speak through, one copy each: a socket on a
server (``connect``; the protocol client itself is ``tests.harness.WsClient``)
and a plain HTTP GET (``http_get``) for probes, pages and metrics."""

from __future__ import annotations

import http.client
import urllib.parse

from tests.harness import WsClient


async def connect(server, cookie: str) -> WsClient:
    """A socket on ``server``, signed in with ``cookie`` (no frame sent yet)."""
    return await WsClient.connect(server.ws, cookie)


def http_get(
    url: str,
    token: str | None = None,
    *,
    cookie: str | None = None,
    host: str | None = None,
    method: str = "GET",
) -> tuple[int, str]:
    """``method`` (GET) ``url`` with a bearer ``token``, a ``cookie`` or a
    ``Host`` of its own: the status and the body, of an error too (no
    redirect is followed)."""
    parts = urllib.parse.urlsplit(url)
    assert parts.scheme == "http", f"http_get speaks plain HTTP, not {url}"
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if cookie:
        headers["Cookie"] = cookie
    if host:
        headers["Host"] = host
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path or "/", headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()
