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
