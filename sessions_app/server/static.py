"""Serving ``/static/`` from the ASGI app itself (``SERVE_STATIC``), fast.

Django's ``ASGIStaticFilesHandler`` serves each file through a synchronous
view on the one shared sync thread: a page's dozen modules and styles queue
behind each other (measured: 250-300 ms before a session page's scripts ran,
most of a fresh tab's time to open a short session). This serves them on the
event loop: each file is found with the staticfiles finders, as Django's
handler does, read once in a thread and then kept in memory while its size
and mtime stay the same, with an ETag so that a reload revalidates with a 304.

Only GET and HEAD; a path that leaves the static directories (``..``, an
absolute path) or names nothing is a 404. In production a proxy usually serves
``collectstatic``'s output instead (``SERVE_STATIC=0``).
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
import os
import posixpath
from dataclasses import dataclass
from urllib.parse import unquote

from django.conf import settings
from django.contrib.staticfiles import finders

# What a module script needs (some systems map .js to application/x-javascript).
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css"}
# Files larger than this are not kept in memory (none of ours is).
MAX_CACHED_BYTES = 1024 * 1024


@dataclass(frozen=True)
class _File:
    body: bytes
    etag: bytes
    content_type: bytes
    stamp: tuple[int, int]  # size, mtime_ns


class StaticFiles:
    """ASGI middleware: ``/static/…`` from the finders, everything else to ``app``."""

    def __init__(self, app):
        self.app = app
        self.prefix = settings.STATIC_URL
        self.files: dict[str, _File] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return await self.app(scope, receive, send)
        if scope["method"] not in ("GET", "HEAD"):
            return await respond_plain(send, 405, b"method not allowed", [(b"allow", b"GET, HEAD")])
        name = _clean(unquote(scope["path"][len(self.prefix) :]))
        found = await asyncio.to_thread(self._load, name) if name else None
        if found is None:
            return await respond_plain(send, 404, b"not found")
        headers = [
            (b"content-type", found.content_type),
            (b"etag", found.etag),
            # Revalidate every time (a 304 costs nothing): a deploy's new
            # client is never mixed with an old cached module.
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
        ]
        sent_tags = dict(scope.get("headers") or []).get(b"if-none-match", b"")
        if found.etag in [t.strip() for t in sent_tags.split(b",")]:
            await send({"type": "http.response.start", "status": 304, "headers": headers[1:]})
            await send({"type": "http.response.body", "body": b""})
            return
        body = b"" if scope["method"] == "HEAD" else found.body
        headers.append((b"content-length", str(len(found.body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _load(self, name: str) -> _File | None:
        """The file ``name`` (from memory while unchanged on disk), or None."""
        path = finders.find(name)
        if not path or not os.path.isfile(path):
            return None
        st = os.stat(path)
        stamp = (st.st_size, st.st_mtime_ns)
        cached = self.files.get(name)
        if cached is not None and cached.stamp == stamp:
            return cached
        with open(path, "rb") as fh:
            body = fh.read()
        ext = posixpath.splitext(name)[1].lower()
        content_type = _TYPES.get(ext) or mimetypes.guess_type(name)[0]
        content_type = content_type or "application/octet-stream"
        if content_type.startswith("text/") or content_type.endswith("javascript"):
            content_type += "; charset=utf-8"
        found = _File(
            body=body,
            etag=b'"' + hashlib.sha256(body).hexdigest()[:32].encode() + b'"',
            content_type=content_type.encode(),
            stamp=stamp,
        )
        if len(body) <= MAX_CACHED_BYTES:
            self.files[name] = found
        return found


def _clean(name: str) -> str | None:
    """A relative path inside the static directories, or None."""
    if not name or "\\" in name or "\x00" in name:
        return None
    normal = posixpath.normpath(name)
    if normal.startswith(("/", "..")) or normal != name.rstrip("/") or normal == ".":
        return None
    return normal


async def respond_plain(
    send, status: int, body: bytes, headers=(), content_type: bytes = b"text/plain; charset=utf-8"
) -> None:
    """A plain-text response (the static files' errors, the probes)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
