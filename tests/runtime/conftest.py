"""Fixtures of the runtime's tests."""

from __future__ import annotations

import json

import pytest

from tests.mcp import servers


@pytest.fixture
def mcp_server(own_server, tmp_path):
    """A server whose runs have the notes MCP server (tests/mcp), and its notes file."""
    start, _procs = own_server
    notes = tmp_path / "notes.txt"
    notes.touch()
    server = start(AGENT_MCP_SERVERS=json.dumps(servers(notes)))
    return server, notes


@pytest.fixture
def no_sweeper():
    """A sweeper an earlier test started in this process (an in-process
    runtime's) is stopped for the test, and started again after: its sweep
    would take over a test's expired run before the test's own call does
    (CI: ``take_over_expired()`` found nothing left; a keeper's beat found a
    run it held taken)."""
    import threading

    from sessions_app.runtime.sweeper import Sweeper

    running = [t for t in threading.enumerate() if isinstance(t, Sweeper)]
    for thread in running:
        thread.stopped.set()
    for thread in running:
        thread.join(30)
    yield
    for thread in running:
        Sweeper(thread.interval).start()
