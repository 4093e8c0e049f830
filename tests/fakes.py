"""Test doubles for agents: an in-memory RunContext and a fake model endpoint.

``FakeContext`` (``sessions_app.testing``, re-exported) records what an
agent does instead of writing a log; ``FakeOpenAIServer`` is an
OpenAI-compatible chat-completions endpoint on 127.0.0.1 that answers from
a script and records the requests it got.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sessions_app.runtime.registry import Tool
from sessions_app.testing import FakeContext

__all__ = ["FakeContext"]


# --- the fake model endpoint --------------------------------------------------


@dataclass
class FakeResponse:
    """One scripted answer: an HTTP status and, for 200, the SSE items to send.

    Items are dicts (sent as ``data: <json>``), strings (sent as raw lines) or
    ``threading.Event`` objects the server waits on (up to 10 s) before going
    on, so a test can hold the stream without sleeping.
    """

    status: int = 200
    items: list[Any] = field(default_factory=list)
    body: bytes = b""  # the body of a non-200 answer
    hold: threading.Event | None = None  # waited on (10 s at most) before answering
    location: str | None = None  # a redirect's target


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def text_response(*fragments: Any) -> FakeResponse:
    """Streams each string fragment as its own chunk (Events pass through)."""
    items: list[Any] = [_chunk({"role": "assistant", "content": ""})]
    for fragment in fragments:
        items.append(
            fragment if isinstance(fragment, threading.Event) else _chunk({"content": fragment})
        )
    items += [_chunk({}, "stop"), "data: [DONE]"]
    return FakeResponse(items=items)


def tool_call_response(*calls: tuple[str, str, str], text: str = "") -> FakeResponse:
    """Streams ``(id, name, arguments_json)`` calls, arguments in small fragments."""
    items: list[Any] = [_chunk({"role": "assistant", "content": None})]
    if text:
        items.append(_chunk({"content": text}))
    for index, (call_id, name, arguments) in enumerate(calls):
        items.append(
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for start in range(0, len(arguments), 5):
            piece = arguments[start : start + 5]
            items.append(
                _chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    items += [_chunk({}, "tool_calls"), "data: [DONE]"]
    return FakeResponse(items=items)


def error_response(status: int, message: str = "boom") -> FakeResponse:
    body = json.dumps({"error": {"message": message, "type": "server_error"}}).encode()
    return FakeResponse(status=status, body=body)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (a timeout test) is not a failure


class FakeOpenAIServer:
    """A chat-completions endpoint in a thread; use as a context manager.

    ``responses`` are answered in order, one per request; ``requests`` holds
    each request's parsed JSON body and ``headers`` its headers.
    """

    path = "/v1/chat/completions"

    def __init__(self, responses: list[FakeResponse] | None = None) -> None:
        self.responses = list(responses or [])
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.release = threading.Event()  # set on exit: frees a handler held on an Event
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                with server._lock:
                    server.requests.append(json.loads(raw or b"{}"))
                    server.headers.append(dict(self.headers))
                    scripted = server.responses.pop(0) if server.responses else None
                if self.path != server.path:
                    scripted = FakeResponse(status=404, body=b'{"error": "not found"}')
                if scripted is None:
                    scripted = error_response(500, "no scripted response left")
                if scripted.hold is not None:
                    scripted.hold.wait(10)
                if scripted.status != 200:
                    self.send_response(scripted.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(scripted.body)))
                    if scripted.location:
                        self.send_header("Location", scripted.location)
                    self.end_headers()
                    self.wfile.write(scripted.body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                pending = b""
                for item in scripted.items:
                    if isinstance(item, threading.Event):
                        self.wfile.write(pending)
                        self.wfile.flush()
                        pending = b""
                        item.wait(10)
                        continue
                    line = item if isinstance(item, str) else "data: " + json.dumps(item)
                    pending += line.encode() + b"\n\n"
                self.wfile.write(pending)
                self.wfile.flush()

            do_GET = do_POST  # noqa: N815 (recorded too: where a redirect would lead)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval, so shutdown (every test's teardown) is quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


# --- Anthropic's Messages API -------------------------------------------------------


class FakeAnthropicServer(FakeOpenAIServer):
    """A Messages endpoint (``POST /v1/messages``), scripted the same way."""

    path = "/v1/messages"


def _sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}"


def anthropic_response(*blocks: Any, stop: str = "end_turn") -> FakeResponse:
    """A streamed message. Each block is a text (a string, or a list of
    fragments and threading.Events to pause at) or a tool use
    ``("tool_use", id, name, input_json_fragments)``."""
    items: list[Any] = [
        _sse({"type": "message_start", "message": {"id": "msg_1", "role": "assistant"}}),
        _sse({"type": "ping"}),
    ]
    for index, block in enumerate(blocks):
        if isinstance(block, tuple):
            _, use_id, name, fragments = block
            start = {"type": "tool_use", "id": use_id, "name": name, "input": {}}
            items.append(
                _sse({"type": "content_block_start", "index": index, "content_block": start})
            )
            for fragment in fragments:
                delta = {"type": "input_json_delta", "partial_json": fragment}
                items.append(_sse({"type": "content_block_delta", "index": index, "delta": delta}))
        else:
            start = {"type": "text", "text": ""}
            items.append(
                _sse({"type": "content_block_start", "index": index, "content_block": start})
            )
            for fragment in [block] if isinstance(block, str) else block:
                if isinstance(fragment, threading.Event):
                    items.append(fragment)
                    continue
                delta = {"type": "text_delta", "text": fragment}
                items.append(_sse({"type": "content_block_delta", "index": index, "delta": delta}))
        items.append(_sse({"type": "content_block_stop", "index": index}))
    items.append(_sse({"type": "message_delta", "delta": {"stop_reason": stop}}))
    items.append(_sse({"type": "message_stop"}))
    return FakeResponse(items=items)


class CarelessAgent:
    """An agent that wraps every call into the runtime in ``except Exception``,
    as agent code often does around a streaming loop. It records what it sees
    in the file named by ``CARELESS_AGENT_LOG``: ``swallowed <type>`` if a stop
    signal ever reached its ``except Exception``, and ``stopped <type>`` from
    its ``finally`` when something ended it. ``/gate`` asks for a tool; any
    other text streams until it is stopped."""

    def _note(self, line: str) -> None:
        import os

        with open(os.environ["CARELESS_AGENT_LOG"], "a") as f:
            f.write(line + "\n")

    def start(self, ctx) -> None:
        try:
            if ctx.text.strip() == "/gate":
                try:
                    ctx.request_tool(
                        "write_file", {"path": "careless.txt", "text": "x"}, {"asked": True}
                    )
                except Exception as exc:
                    self._note(f"swallowed {type(exc).__name__}")
                ctx.message("after the gate")
                return
            for i in range(2000):
                try:
                    ctx.delta(f"tok{i} ")
                    ctx.sleep(0.02)
                except Exception as exc:
                    self._note(f"swallowed {type(exc).__name__}")
        except BaseException as exc:
            self._note(f"stopped {type(exc).__name__}")
            raise

    def resume(self, ctx, outcome) -> None:
        ctx.message("resumed")


class Shout(Tool):
    """A third tool, added through the registry (``AGENT_TOOLS``) by the
    tests, without editing the app: answers its text in capitals, in a file
    of the workspace too, so a test can count its executions."""

    name = "shout"
    description = "Say TEXT in capitals."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    display = [{"arg": "text", "label": "what", "as": "code"}]

    def execute(self, args, workspace):
        said = args["text"].upper() * args.get("times", 1)
        with open(workspace / "shouts.txt", "a") as out:
            out.write(said + "\n")
        return True, said


class FaultyAgent:
    """An agent whose step meets an error of ``FAULTY_AGENT_ERROR`` (a dotted
    class, ``django.db.DataError`` say) after its first delta: what the run
    does with an error that is not an outage."""

    def start(self, ctx) -> None:
        import importlib
        import os

        ctx.delta("before ")
        module, name = os.environ["FAULTY_AGENT_ERROR"].rsplit(".", 1)
        raise getattr(importlib.import_module(module), name)("the step failed")

    def resume(self, ctx, outcome) -> None:  # pragma: no cover - it never parks
        raise AssertionError("never parked")
