"""An MCP server written with the official ``mcp`` package, spoken to over
stdio by the runtime in tests (tests/runtime/test_mcp.py, tests/browser):

- ``add(a, b)``: listed in the tests' ``auto_approve``; runs without asking;
- ``note(text)``: gated; appends a line to ``$NOTES_FILE`` (each execution
  counted there: exactly once per approved call);
- ``crash()``: the server exits in the middle of the call.

Run as ``python -m tests.mcp.notes_server`` (stdio), or with ``--http PORT``
(streamable HTTP on 127.0.0.1, every request needing ``X-Test-Key: k``).
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
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import uvicorn
        from starlette.middleware.base import BaseHTTPMiddleware
        from starlette.responses import PlainTextResponse

        async def keyed(request, call_next):
            if request.headers.get("x-test-key") != "k":
                return PlainTextResponse("no key", status_code=401)
            return await call_next(request)

        app = server.streamable_http_app()
        app.add_middleware(BaseHTTPMiddleware, dispatch=keyed)
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run()
