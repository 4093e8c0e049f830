"""The API's OpenAPI schema and its docs page, the same in any site that
embeds the app: their settings are the views' own (over
whatever ``SPECTACULAR_SETTINGS`` the site has: ``INFO`` and the hook, on
each response), the docs page's Swagger UI
comes from this site's static files (``drf_spectacular_sidecar``), never a
CDN the app's CSP would refuse, and the hook adds what plain async views add
to the API, which drf-spectacular cannot see."""

from __future__ import annotations

from django.templatetags.static import static
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

TITLE = "Agent sessions API"
INFO = {
    "title": TITLE,
    "description": (
        "Sessions, their event logs, messages, approval decisions and cancels. "
        "Live: the WebSocket protocol at /ws/sessions/ (docs/protocol.md), or the "
        "read-only Server-Sent Events stream at …/stream/."
    ),
    "version": "1",
}


class ApiSchema(SpectacularAPIView):
    """The schema, with the app's own title and the stream's path, whatever
    the site's ``SPECTACULAR_SETTINGS`` (applied to this response: the
    package's settings object is shared by every thread); itself not in it."""

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        if isinstance(response.data, dict):
            response.data.setdefault("info", {}).update(INFO)
            add_to_schema(response.data, None, request, self.serve_public)
        return response


class ApiDocs(SpectacularSwaggerSplitView):
    """Swagger UI from the sidecar's static files, whatever the site's settings."""

    title = TITLE

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return static(f"drf_spectacular_sidecar/swagger-ui-dist/{filename}")

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return static("drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png")


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
