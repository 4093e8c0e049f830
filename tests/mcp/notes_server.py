"""An MCP server written with the official ``mcp`` package, spoken to over
stdio by the runtime in tests (tests/runtime/test_mcp.py, tests/browser):

- ``add(a, b)``: listed in the tests' ``auto_approve``; runs without asking;
- ``note(text)``: gated; appends a line to ``$NOTES_FILE`` (each execution
  counted there: exactly once per approved call);
- ``crash()``: the server exits in the middle of the call;
- ``forget(name)``: asks the user first (an elicitation, a yes/no with no
  default), then appends ``forgot <name>`` if the answer was yes;
- ``rename(name)``: asks for a new name (a form with a required text and
  no default: a person types it);
- ``tag(name)``: asks for tags (a field with a ``pattern``, which no card
  checks: the runtime declines without asking).

Run as ``python -m tests.mcp.notes_server`` (stdio), or with ``--http PORT``
(streamable HTTP on 127.0.0.1, every request needing ``X-Test-Key: k``).
"""

from __future__ import annotations

import os
from typing import Annotated

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from pydantic import BaseModel, Field

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


class Sure(BaseModel):
    sure: bool


class NewName(BaseModel):
    new_name: str


class Tags(BaseModel):
    tags: str = Field(pattern=r"^[a-z,]+$")


# Asked the way the package supports on every protocol version: a resolver
# returns Elicit (a multi-round-trip input request from 2026-07-28 on, a
# server-to-client request before).
def ask_sure(name: str) -> Elicit[Sure]:
    return Elicit(f"Forget the note {name!r}?", Sure)


def ask_name(name: str) -> Elicit[NewName]:
    return Elicit(f"Rename {name!r} to?", NewName)


def ask_tags(name: str) -> Elicit[Tags]:
    return Elicit(f"Tags for {name!r}?", Tags)


@server.tool()
def forget(name: str, asked: Annotated[ElicitationResult[Sure], Resolve(ask_sure)]) -> str:
    """Forget a note, once the user says so."""
    if isinstance(asked, AcceptedElicitation) and asked.data.sure:
        with open(os.environ["NOTES_FILE"], "a", encoding="utf-8") as notes:
            notes.write(f"forgot {name}\n")
        return f"forgot {name}"
    return f"kept {name}: {asked.action}"


@server.tool()
def rename(name: str, asked: Annotated[ElicitationResult[NewName], Resolve(ask_name)]) -> str:
    """Rename a note to what the user types."""
    if isinstance(asked, AcceptedElicitation):
        return f"renamed {name} to {asked.data.new_name}"
    return f"kept {name}: {asked.action}"


@server.tool()
def tag(name: str, asked: Annotated[ElicitationResult[Tags], Resolve(ask_tags)]) -> str:
    """Tag a note (a form no card renders)."""
    if isinstance(asked, AcceptedElicitation):
        return f"tagged {name}"
    return f"untagged {name}: {asked.action}"


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
