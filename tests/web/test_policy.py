"""One HTTP policy (sessions_app/web/policy.py): the REST API and every
streamed endpoint (the native SSE stream, the AI SDK's, AG-UI's) refuse a
caller the same way, with the same status, code and headers, against a real
daphne: the REST API's DRF pipeline decides for all of them."""

from __future__ import annotations

import httpx
import pytest

from sessions_app.log.sessions import create_session
from tests.harness import Daphne, api_key

pytestmark = pytest.mark.django_db(transaction=True)


def reads(session_id: str) -> list[str]:
    """A read of the REST API, and of each streamed endpoint."""
    return [
        f"/api/sessions/{session_id}/events/",
        f"/api/sessions/{session_id}/stream/",
        f"/api/ai-sdk/chat/{session_id}/messages",
        f"/api/ag-ui/{session_id}/stream",
    ]


def answers(c: httpx.Client, paths: list[str], **kw) -> set[tuple[int, str]]:
    got = set()
    for path in paths:
        r = c.get(path, **kw)
        got.add((r.status_code, r.json()["code"]))
    return got


def test_a_caller_not_signed_in_or_with_a_bad_key_is_refused_alike(server, user):
    """No cookie and no key: 403 not_authenticated everywhere; a key that is
    not one: 403 authentication_failed everywhere (the REST API's answer,
    with its ``detail`` beside the protocol's ``code`` and ``message``)."""
    paths = reads(create_session(user).id)
    with httpx.Client(base_url=server.http, timeout=30) as c:
        assert answers(c, paths) == {(403, "not_authenticated")}
        bad = {"Authorization": "Token not-a-key"}
        assert answers(c, paths, headers=bad) == {(403, "authentication_failed")}
        body = c.get(paths[1], headers=bad).json()
        assert body["detail"] == body["message"] == "invalid, expired or revoked token"


def test_a_cookies_write_without_its_csrf_header_is_refused_alike(server, cookie):
    """A cookie's POST without the CSRF header: 403 csrf_failed from the REST
    API and from both dialects."""
    name, value = cookie.split("=", 1)
    with httpx.Client(base_url=server.http, cookies={name: value}, timeout=30) as c:
        codes = {
            (r.status_code, r.json()["code"])
            for r in (
                c.post("/api/sessions/", json={"title": "x"}),
                c.post("/api/ai-sdk/chat", json={"id": "p1", "messages": []}),
                c.post("/api/ag-ui/", json={}),
            )
        }
    assert codes == {(403, "csrf_failed")}


def test_the_rate_refuses_every_endpoint_alike(user, tmp_path):
    """Past ``AGENT_API_RATE`` every endpoint answers 429 throttled with
    ``Retry-After`` and ``retry_after``, streamed or not: one count."""
    session = create_session(user)
    daphne = Daphne(tmp_path, AGENT_API_RATE="4/minute").start()
    try:
        headers = {"Authorization": f"Token {api_key(user)}"}
        with httpx.Client(base_url=daphne.http, headers=headers, timeout=30) as c:
            paths = reads(session.id)
            for path in paths:  # the minute's four, answered (the streams opened)
                with c.stream("GET", path) as r:
                    assert r.status_code == 200, path
            for path in paths:
                r = c.get(path)
                assert (r.status_code, r.json()["code"]) == (429, "throttled"), path
                assert int(r.headers["Retry-After"]) == r.json()["retry_after"] > 0
    finally:
        daphne.stop()


def test_a_cookies_write_with_its_csrf_header_is_parsed_once_and_bounded(server, cookie):
    """A cookie's POST with its CSRF header reaches the dialect, whose own
    reading of the body answers: a body nested too deep is a 400 bad_json
    from both dialects and the REST API (never the 500 of a parser without
    the bound), and a text/plain JSON body is read as JSON (no 415)."""
    name, value = cookie.split("=", 1)
    with httpx.Client(base_url=server.http, cookies={name: value}, timeout=30) as c:
        c.get("/accounts/login/")  # the CSRF cookie
        headers = {"X-CSRFToken": c.cookies.get("csrftoken") or "", "Referer": server.http + "/"}
        deep = "[" * 5000 + "]" * 5000
        for path in ("/api/ai-sdk/chat", "/api/ag-ui/", "/api/sessions/"):
            r = c.post(path, content=deep, headers={**headers, "Content-Type": "application/json"})
            assert (r.status_code, r.json()["code"]) == (400, "bad_json"), path
        plain = {**headers, "Content-Type": "text/plain"}
        r = c.post("/api/ai-sdk/chat", content='{"id": "p2", "messages": []}', headers=plain)
        assert r.status_code == 400 and r.json()["code"] != "unsupported_media_type", r.text


def test_a_request_that_names_a_key_is_the_keys(server, user, cookie):
    """A request with ``Authorization: Token …`` is the key's, whatever cookie
    it carries: a bad key is refused though the cookie is good, and a good
    key's write needs no CSRF header."""
    name, value = cookie.split("=", 1)
    with httpx.Client(base_url=server.http, cookies={name: value}, timeout=30) as c:
        bad = c.get("/api/sessions/", headers={"Authorization": "Token not-a-key"})
        assert (bad.status_code, bad.json()["code"]) == (403, "authentication_failed")
        good = {"Authorization": f"Token {api_key(user)}"}
        made = c.post("/api/sessions/", json={"title": "by key"}, headers=good)
        assert made.status_code == 201, made.text
