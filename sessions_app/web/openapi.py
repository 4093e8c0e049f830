"""The OpenAPI schema's additions (drf-spectacular postprocessing hooks, named
in ``SPECTACULAR_SETTINGS``): what plain async views add to the API, which
drf-spectacular cannot see."""

from __future__ import annotations


def add_to_schema(result, generator, request, public):
    """drf-spectacular postprocessing hook (``SPECTACULAR_SETTINGS``): the
    stream is a plain async view, not a DRF one, so its path is added here,
    under the prefix the API's other paths have."""
    events = next((k for k in result.get("paths", {}) if k.endswith("/{session_id}/events/")), None)
    if events is None:
        return result
    path = events.removesuffix("events/") + "stream/"
    result["paths"][path] = {
        "get": {
            "operationId": "sessions_stream",
            "summary": "The session's log as Server-Sent Events (read-only)",
            "description": (
                "text/event-stream: each event is `id: <seq>`, `event: <kind>`, `data: "
                "<the event frame>`. It opens with `event: stream` (`session_id`, `epoch`, "
                "`head`), resumes after `Last-Event-ID` (or `?after=N`), sends a comment "
                "while idle and ends with `event: reset` (a resume_rejected frame) when the "
                "cursor cannot be honoured. See docs/sse.md."
            ),
            "tags": ["sessions"],
            "parameters": [
                {
                    "name": "session_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                {"name": "epoch", "in": "query", "schema": {"type": "string"}},
                {"name": "compact", "in": "query", "schema": {"type": "boolean"}},
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer"}},
            ],
            "responses": {
                "200": {
                    "description": "the stream",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                "400": {"description": "a cursor that is not an integer from 0"},
                "403": {"description": "not signed in"},
                "404": {"description": "no such session of this user"},
                "429": {"description": "too many streams of this user open on this server"},
            },
            "security": [{"cookieAuth": []}, {"tokenAuth": []}],
        }
    }
    return result
