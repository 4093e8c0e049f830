"""What the HTTP model backends share: one streamed POST, read as server-sent
events, its text handed to the run as coalesced deltas.

Only the standard library. A backend gives the URL, the JSON body, its headers
and its secret (redacted from every error message), and a function that folds
one SSE ``data:`` payload into its own state and returns the text fragment in
it; ``stream`` does the rest.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from sessions_app.runtime import registry
from sessions_app.runtime.base import AgentError, RunContext
from sessions_app.wire import strict_json

# Text fragments arriving within this long of the first buffered one go out
# as one delta, so a fast model is not one event per token.
COALESCE_SECONDS = 0.03
MAX_ERROR_DETAIL = 500


def redact(value: Any, secret: str) -> str:
    """``str(value)`` without ``secret``, whatever an endpoint echoes back."""
    text = str(value)
    return text.replace(secret, "[redacted]") if secret else text


def error_message(body: Any, secret: str) -> str:
    """The ``error.message`` (or ``error``) of an error body, redacted and capped."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return redact(message, secret)[:MAX_ERROR_DETAIL] if message else ""


def timeout_error(timeout: float) -> AgentError:
    return AgentError(f"the model endpoint did not answer within {timeout:g} s")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the error it is here: following one would
    send the request's credentials (``Authorization``, ``x-api-key``) to
    wherever the endpoint points, another host or plain http included."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def open_stream(
    url: str, body: dict[str, Any], headers: dict[str, str], *, secret: str, timeout: float
) -> Any:
    """POST ``body`` to ``url`` for a stream of server-sent events; every
    failure is an ``AgentError`` that says what happened, without the secret."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise AgentError("the model endpoint must be an http or https URL")
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **headers}
    request = urllib.request.Request(  # noqa: S310 -- scheme checked
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        return _OPENER.open(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        detail = ""
        try:
            raw = exc.read(64 * 1024).decode("utf-8", errors="replace")
            detail = error_message(json.loads(raw), secret)
        except (OSError, ValueError):
            pass
        finally:
            exc.close()
        suffix = f": {detail}" if detail else ""
        raise AgentError(f"the model endpoint answered HTTP {exc.code}{suffix}") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise timeout_error(timeout) from None
        reason = redact(exc.reason, secret)
        raise AgentError(f"could not reach the model endpoint: {reason}") from None
    except TimeoutError:
        raise timeout_error(timeout) from None
    except OSError as exc:
        raise AgentError(f"could not reach the model endpoint: {redact(exc, secret)}") from None


def _read_sse(response: Any, events: queue.Queue) -> None:
    """Reader thread: hands each ``data:`` payload to the run's thread."""
    try:
        for raw in response:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            events.put(("data", payload))
    except Exception as exc:  # any failure, re-raised in the run's thread
        events.put(("error", exc))
    finally:
        events.put(("end", None))


def stream(
    ctx: RunContext,
    response: Any,
    on_data: Callable[[str], str],
    *,
    secret: str,
    timeout: float,
) -> str:
    """Read ``response`` to its end: each payload goes through ``on_data``,
    the text fragments it returns go to ``ctx.delta`` (coalesced); returns the
    whole text. The response is closed whatever happens."""
    # A reader thread, so a buffered fragment goes out on time even while
    # the model is silent; ctx is only ever called from this thread.
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    reader = threading.Thread(
        target=_read_sse, args=(response, events), name="model-sse", daemon=True
    )
    reader.start()
    text: list[str] = []
    buffer: list[str] = []
    flush_at: float | None = None
    try:
        while True:
            wait = None if flush_at is None else max(flush_at - time.monotonic(), 0)
            try:
                kind, payload = events.get(timeout=wait)
            except queue.Empty:
                kind, payload = "flush", None
            if kind == "end":
                break
            if kind == "error":
                if isinstance(payload, TimeoutError):
                    raise timeout_error(timeout)
                detail = redact(payload, secret) or type(payload).__name__
                raise AgentError(f"the model's stream broke off: {detail}")
            if kind == "data":
                fragment = on_data(payload)
                if fragment:
                    text.append(fragment)
                    if not buffer:
                        flush_at = time.monotonic() + COALESCE_SECONDS
                    buffer.append(fragment)
            if buffer and flush_at is not None and time.monotonic() >= flush_at:
                ctx.delta("".join(buffer))
                buffer.clear()
                flush_at = None
    finally:
        response.close()  # also stops the reader when we leave early
    if buffer:
        ctx.delta("".join(buffer))
    return "".join(text)


def parse_tool_call(call: dict[str, str], what: str) -> tuple[dict[str, Any] | None, str | None]:
    """A model's tool call (``name`` and its JSON ``arguments``; ``what``
    names them in the error: "the arguments are", "the input is") as the
    arguments to ask for, or the error to answer the model with instead (an
    unknown tool, arguments that are not JSON or not valid for the tool):
    such a call never reaches a person's approval card."""
    name = call.get("name", "")
    if name not in registry.names():
        known = ", ".join(registry.names())
        return None, f"error: unknown tool {name!r}; the tools are {known}"
    try:
        args = strict_json.loads(call.get("arguments") or "{}")
    except json.JSONDecodeError as exc:
        return None, f"error: {what} not valid JSON ({exc.msg})"
    problem = registry.validate_args(name, args)
    if problem:
        return None, f"error: {problem}"
    return args, None


def parse_json(payload: str) -> dict[str, Any]:
    """One event's JSON object, or the ``AgentError`` for a malformed one."""
    try:
        chunk = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise AgentError(f"the model endpoint sent a malformed chunk ({exc.msg})") from exc
    if not isinstance(chunk, dict):
        raise AgentError("the model endpoint sent a malformed chunk")
    return chunk
