"""An MCP server on the 2025-06-18 protocol, written by hand over stdio (no
SDK), so that a test controls exactly what reaches the client and when:
a question (``elicitation/create``) sent outside its call's response, with
or without the call named in its ``_meta``. Each step waits for a file the
test makes in ``$LEGACY_DIR``, never for time; what the server hears back
is appended to ``$LEGACY_DIR/answers`` (``<tool> <action>``).

- ``ask(name)``: once ``go-<name>`` exists, asks "Delete the file
  <name>?", naming no call (as servers on this protocol do);
- ``ask_named(name)``: the same, with the call's own ``_meta`` sent back in
  the question's ``_meta`` (the way this project lets a server name its call);
- ``wait(name)``: writes ``waiting-<name>``, answers once ``go-<name>`` exists;
- ``whoami()``: answers with the ``_meta`` its call carried, as JSON.

Run as ``python -m tests.mcp.legacy_server``.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path

DIR = Path(os.environ.get("LEGACY_DIR", "."))
VERSION = "2025-06-18"
TOOLS = [
    {"name": name, "description": name, "inputSchema": {"type": "object", "properties": props}}
    for name, props in (
        ("ask", {"name": {"type": "string"}}),
        ("ask_named", {"name": {"type": "string"}}),
        ("wait", {"name": {"type": "string"}}),
        ("whoami", {}),
    )
]
FORM = {"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}

out_lock = threading.Lock()
asked: dict[int, dict] = {}
answered: dict[int, threading.Event] = {}
ids = itertools.count(1000)


def send(message: dict) -> None:
    with out_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def until(path: Path) -> None:
    while not path.exists():
        time.sleep(0.02)  # sleep-ok: the server polls for a file the test makes


def question(tool: str, name: str, meta: dict | None) -> None:
    request_id = next(ids)
    answered[request_id] = threading.Event()
    params: dict = {"message": f"Delete the file {name}?", "requestedSchema": FORM}
    if meta is not None:
        params["_meta"] = meta
    send({"jsonrpc": "2.0", "id": request_id, "method": "elicitation/create", "params": params})
    answered[request_id].wait()
    action = asked.pop(request_id).get("result", {}).get("action", "error")
    with open(DIR / "answers", "a", encoding="utf-8") as answers:
        answers.write(f"{tool} {action}\n")


def call(request_id, params: dict) -> None:
    tool, args = params["name"], params.get("arguments") or {}
    meta = params.get("_meta")
    name = str(args.get("name", ""))
    if tool in ("ask", "ask_named"):
        until(DIR / f"go-{name}")
        question(tool, name, meta if tool == "ask_named" else None)
        text = f"asked about {name}"
    elif tool == "wait":
        (DIR / f"waiting-{name}").touch()
        until(DIR / f"go-{name}")
        text = f"waited {name}"
    else:
        text = json.dumps(meta)
    send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"content": [{"type": "text", "text": text}]},
        }
    )


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method is None:  # an answer to a question
            asked[request_id] = message
            answered[request_id].set()
        elif method == "initialize":
            result = {
                "protocolVersion": VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "legacy", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            threading.Thread(target=call, args=(request_id, message["params"]), daemon=True).start()
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif request_id is not None:
            error = {"code": -32601, "message": f"no method {method}"}
            send({"jsonrpc": "2.0", "id": request_id, "error": error})


if __name__ == "__main__":
    main()
