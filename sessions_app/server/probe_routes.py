"""``/healthz`` and ``/readyz`` answered ahead of Django, whatever the Host.

The runbook probes each daphne directly (``curl http://127.0.0.1:8001/readyz``)
while ``ALLOWED_HOSTS`` names only the public site: through Django that is a
400 (``DisallowedHost``). The probes reveal nothing a Host check protects (no
links are built from it), so ``agentsite/asgi.py`` answers them here, before
Django (``application_for(..., probes=True)``, inside the runtime's starter:
a probe starts the runtime as any request does), as a load balancer or a
process manager asks. nginx keeps them to ``OPERATOR_NETWORK``
(deploy/nginx). A project embedding the app asks for the same with the same
argument (docs/embedding.md).
"""

from __future__ import annotations

from sessions_app.server import metrics
from sessions_app.server.static import respond_plain

PATHS = ("/healthz", "/readyz")


class Probes:
    """ASGI middleware: GET or HEAD of ``/healthz`` (the process answers) and
    ``/readyz`` (the database and the channel layer answer, else 503)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "http"
            or scope.get("path") not in PATHS
            or scope.get("method") not in ("GET", "HEAD")
        ):
            return await self.application(scope, receive, send)
        if scope["path"] == "/healthz":
            status, text = 200, "ok"
        else:
            status, text = await metrics.readiness()
        body = b"" if scope["method"] == "HEAD" else text.encode()
        await respond_plain(send, status, body, [(b"cache-control", b"no-store")])
