"""MCP servers as tools (sessions_app/runtime/mcp.py): a server written with
the official ``mcp`` package (tests/mcp/notes_server.py), started over stdio
by each process that runs agents, its tools gated like every tool, against a
real daphne (and run workers in production)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from sessions_app.models import ApprovalRequest, Event
from tests.harness import api_key
from tests.mcp import servers
from tests.support.log import finished
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def kinds(session_id: str) -> list[tuple[str, dict]]:
    return list(
        Event.objects.filter(session_id=session_id).order_by("seq").values_list("kind", "data")
    )


def send(client: httpx.Client, text: str, cmid: str) -> tuple[str, str]:
    session = client.post("/api/sessions/", json={}).json()["id"]
    sent = client.post(
        f"/api/sessions/{session}/messages/", json={"client_message_id": cmid, "text": text}
    )
    assert sent.status_code == 201, sent.text
    return session, sent.json()["run_id"]


def test_a_gated_mcp_tool_runs_once_after_approval_and_an_auto_one_at_once(mcp_server, user):
    """notes__note asks first, runs once when approved (one line in the file,
    one tool.result); notes__add, on the server's auto_approve list, runs
    with no gate: tool.call, then its result."""
    server, notes = mcp_server
    with httpx.Client(
        base_url=server.http, headers={"Authorization": f"Token {api_key(user)}"}, timeout=30
    ) as c:
        sid, run_id = send(c, '/tool notes__note {"text": "hello mcp"}', "m1")
        gate = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run_id).first())
        assert gate.tool == "notes__note" and gate.status == "pending"
        decided = c.post(f"/api/approvals/{gate.id}/decide/", json={"decision": "approve"})
        assert decided.status_code == 200
        again = c.post(f"/api/approvals/{gate.id}/decide/", json={"decision": "approve"})
        assert again.status_code == 409
        run = wait_for(lambda: finished(run_id))
        assert run.stop_reason == "end_turn"
        assert notes.read_text() == "hello mcp\n"
        results = [d for k, d in kinds(sid) if k == "tool.result"]
        assert results == [
            {"tool_call_id": gate.tool_call_id, "ok": True, "output": "noted: hello mcp"}
        ]

        sid, run_id = send(c, '/tool notes__add {"a": 2, "b": 40}', "m2")
        run = wait_for(lambda: finished(run_id))
        assert run.stop_reason == "end_turn"
        logged = kinds(sid)
        assert [k for k, _ in logged if k.startswith(("tool.", "approval."))] == [
            "tool.call",
            "tool.result",
        ]
        assert [d["output"] for k, d in logged if k == "tool.result"] == ["42"]
        assert ApprovalRequest.objects.get(run_id=run_id).decided_by == "auto-approve"


def test_a_server_that_dies_mid_call_is_a_tool_error_and_the_run_goes_on(mcp_server, user):
    """crash() takes the server down during the call: the call's result is an
    error, the run ends end_turn, and the next call reconnects."""
    server, notes = mcp_server
    with httpx.Client(
        base_url=server.http, headers={"Authorization": f"Token {api_key(user)}"}, timeout=30
    ) as c:
        sid, run_id = send(c, "/tool notes__crash {}", "m1")
        gate = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run_id).first())
        c.post(f"/api/approvals/{gate.id}/decide/", json={"decision": "approve"})
        run = wait_for(lambda: finished(run_id))
        assert run.stop_reason == "end_turn"
        (result,) = [d for k, d in kinds(sid) if k == "tool.result"]
        assert result["ok"] is False and "MCP server 'notes' failed" in result["output"]
        sid, run_id = send(c, '/tool notes__add {"a": 1, "b": 1}', "m2")
        wait_for(lambda: finished(run_id))
        assert [d["output"] for k, d in kinds(sid) if k == "tool.result"] == ["2"]


def test_a_server_that_cannot_start_fails_the_check_by_name(tmp_path):
    """manage.py check names the server that cannot start (E003), and a
    malformed entry, before any run needs them."""
    broken = {"gone": {"command": [str(tmp_path / "no-such-program")]}, "odd": {"url": "ftp://x"}}
    with override_settings(AGENT_MCP_SERVERS=broken), pytest.raises(SystemCheckError) as failed:
        call_command("check")
    text = str(failed.value)
    assert "sessions_app.E003" in text and "AGENT_MCP_SERVERS['gone']" in text
    assert "AGENT_MCP_SERVERS['odd']: 'url' must be an http(s) URL" in text


def test_the_check_lists_a_working_server(tmp_path):
    """A server that starts and lists its tools passes the check, run from a shell."""
    env = {"AGENT_MCP_SERVERS": json.dumps(servers(tmp_path / "n.txt")), "SECRET_KEY": "x"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**__import__("os").environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def http_server(tmp_path):
    """The notes server on streamable HTTP, each request needing a header."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp.notes_server", "--http", str(port)],
        cwd=ROOT,
        env={**__import__("os").environ, "NOTES_FILE": str(tmp_path / "n.txt")},
    )

    def up():
        try:
            return httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1).status_code == 401
        except httpx.HTTPError:
            return False

    wait_for(up, timeout=30)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.kill()
    proc.wait()


def test_a_streamable_http_server_is_reached_with_its_headers(http_server, tmp_path):
    """A url entry: its tools are listed and called with the entry's headers;
    without them the server refuses, and the check names it."""
    from sessions_app.runtime import mcp, registry

    keyed = {"web": {"url": http_server, "headers": {"X-Test-Key": "k"}, "auto_approve": []}}
    with override_settings(AGENT_MCP_SERVERS=keyed):
        assert "web__add" not in registry.tools()  # a lookup never connects
        assert registry.validate_args("web__add", {"a": 1, "b": 2}) is None  # this lists
        assert "web__add" in registry.tools()
        assert registry.execute("web__add", {"a": 20, "b": 22}, tmp_path) == (True, "42")
        assert not registry.is_auto_approved("web__note")
    bare = {"bare": {"url": http_server}}
    with override_settings(AGENT_MCP_SERVERS=bare), pytest.raises(mcp.McpUnavailable):
        mcp.load("bare")
