"""An MCP server written with the official ``mcp`` package, spoken to over
stdio by the runtime in tests (tests/runtime/test_mcp.py, tests/browser):

- ``add(a, b)``: listed in the tests' ``auto_approve``; runs without asking;
- ``note(text)``: gated; appends a line to ``$NOTES_FILE`` (each execution
  counted there: exactly once per approved call);
- ``crash()``: the server exits in the middle of the call.

Run as ``python -m tests.mcp.notes_server``.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def note(text: str) -> str:
    """Append a line to the notes file."""
    with open(os.environ["NOTES_FILE"], "a", encoding="utf-8") as notes:
        notes.write(text + "\n")
    return f"noted: {text}"


@server.tool()
def crash() -> str:
    """Exit in the middle of the call."""
    os._exit(3)


if __name__ == "__main__":
    server.run()
