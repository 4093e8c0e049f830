"""static.py: /static/ served by the ASGI app, with types, ETags, and no way out
of the static directories."""

from __future__ import annotations

import pytest

from sessions_app.server.static import StaticFiles


async def _get(path: str, method: str = "GET", headers=()) -> tuple[int, dict, bytes]:
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"app"})

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "method": method, "headers": list(headers)}
    await StaticFiles(app)(scope, None, send)
    start, body = sent
    return start["status"], dict(start["headers"]), body["body"]


async def test_a_module_is_served_with_its_type_and_an_etag():
    """A client module comes back whole, as JavaScript, revalidated by ETag (304)."""
    status, headers, body = await _get("/static/sessions_app/js/model/apply.js")
    assert status == 200 and body.startswith(b"/**")
    assert headers[b"content-type"] == b"text/javascript; charset=utf-8"
    assert headers[b"cache-control"] == b"no-cache" and headers[b"x-content-type-options"]
    assert int(headers[b"content-length"]) == len(body)
    again, headers2, empty = await _get(
        "/static/sessions_app/js/model/apply.js", headers=[(b"if-none-match", headers[b"etag"])]
    )
    assert (again, empty, headers2[b"etag"]) == (304, b"", headers[b"etag"])
    head, _, nothing = await _get("/static/sessions_app/css/app.css", method="HEAD")
    assert (head, nothing) == (200, b"")


@pytest.mark.parametrize(
    "path",
    [
        "/static/../manage.py",
        "/static/sessions_app/js/../../../manage.py",
        "/static/%2e%2e/manage.py",
        "/static//etc/passwd",
        "/static/sessions_app/js/nope.js",
        "/static/",
        "/static/sessions_app/js/model",
        "/static/sessions_app/js/model\\apply.js",
    ],
)
async def test_nothing_outside_the_static_files_is_served(path):
    """A path that leaves the static directories or names no file is a 404."""
    status, _, body = await _get(path)
    assert status == 404 and b"manage" not in body


async def test_other_paths_and_methods():
    """Other paths go to the app; a POST to /static/ is 405."""
    assert (await _get("/s/x/"))[0] == 299
    assert (await _get("/static/sessions_app/js/model/apply.js", method="POST"))[0] == 405


def test_vendored_libraries_are_pinned_and_licensed():
    """Every vendored file matches the checksum static/sessions_app/vendor/README.md lists,
    every listed file is there, and each library carries its licence."""
    import hashlib
    import re
    from pathlib import Path

    vendor = Path(__file__).resolve().parents[2] / "static" / "sessions_app" / "vendor"
    listed = dict(
        (path, digest)
        for digest, path in re.findall(
            r"^([0-9a-f]{64})  (\S+)$", (vendor / "README.md").read_text(), re.M
        )
    )
    present = {
        str(p.relative_to(vendor)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in vendor.rglob("*")
        if p.is_file() and not p.name.startswith("LICENSE") and p.name != "README.md"
    }
    assert present == listed
    for library in ("marked", "dompurify", "highlight"):
        assert (vendor / library / "LICENSE").is_file(), library
