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

from asgiref.sync import sync_to_async

from sessions_app.server import metrics
from sessions_app.server.static import respond_plain

PATHS = ("/healthz", "/readyz")
# Scraped ahead of Django with the scraper's token (``AGENT_METRICS_TOKEN``),
# on a daphne's own port: no Host check, no https redirect. Without the
# token they go on to Django (a staff user's cookie).
METRICS = ("/metrics", "/metrics/database")


class Probes:
    """ASGI middleware: GET or HEAD of ``/healthz`` (the process answers),
    ``/readyz`` (the database and the channel layer answer, else 503), and
    of ``/metrics`` and ``/metrics/database`` with the scraper's token."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") not in ("GET", "HEAD"):
            return await self.application(scope, receive, send)
        if scope.get("path") in METRICS and metrics.bearer_ok(_authorization(scope)):
            body = await sync_to_async(metrics.scrape, thread_sensitive=False)(scope["path"])
            if scope["method"] == "HEAD":
                body = b""
            headers = [(b"cache-control", b"no-store")]
            kind = metrics.CONTENT_TYPE_LATEST.encode()
            return await respond_plain(send, 200, body, headers, content_type=kind)
        if scope.get("path") not in PATHS:
            return await self.application(scope, receive, send)
        if scope["path"] == "/healthz":
            status, text = 200, "ok"
        else:
            status, text = await metrics.readiness(metrics.bearer_ok(_authorization(scope)))
        body = b"" if scope["method"] == "HEAD" else text.encode()
        await respond_plain(send, status, body, [(b"cache-control", b"no-store")])


def _authorization(scope) -> str:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return value.decode("latin-1")
    return ""
