"""A run worker's own HTTP port: ``/metrics``, ``/healthz`` and ``/readyz``.

A worker is not a web server, but its figures (appends, group commits,
publication lag, runs) live in its process, so it serves them itself on a
port of its own (``AGENT_WORKER_METRICS_PORT``; off when 0), on
``AGENT_WORKER_METRICS_HOST`` (loopback unless set). The same rules as the
site's own: ``/metrics`` needs ``Authorization: Bearer $AGENT_METRICS_TOKEN``
when a token is set (without one, only the loopback host may be used);
``/healthz`` says the process and its task loop are alive; ``/readyz`` that
the database answers. A plain ``http.server`` in a daemon thread: nothing of
it touches the runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from sessions_app.server import metrics

log = logging.getLogger(__name__)

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # A scraper that hung up mid-answer: a line through logging (JSON
        # under LOG_FORMAT=json), not the standard library's traceback.
        log.warning("probe from %s failed", client_address[0], exc_info=True)


def serve(host: str, port: int, alive: Callable[[], bool]) -> ThreadingHTTPServer:
    """Start serving in a daemon thread; the server (``server_address`` has
    the port, if 0 was asked for a free one). Refuses a host other than
    loopback without ``AGENT_METRICS_TOKEN``."""
    token = settings.AGENT_METRICS_TOKEN
    if host not in LOOPBACK and not token:
        raise ImproperlyConfigured(
            f"AGENT_WORKER_METRICS_HOST={host} is not loopback: set AGENT_METRICS_TOKEN"
        )

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                if token and not metrics.bearer_ok(self.headers.get("Authorization", "")):
                    return self._answer(404, "not found")
                return self._answer(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            if path == "/healthz":
                running = alive()
                return self._answer(200 if running else 503, "ok" if running else "stopped")
            if path == "/readyz":
                try:
                    metrics.database_works()
                except Exception:
                    log.exception("readyz: the database does not answer")
                    return self._answer(503, "not ready: database")
                return self._answer(200, "ready")
            return self._answer(404, "not found")

        def _answer(self, status: int, body, content_type: str = "text/plain") -> None:
            data = body if isinstance(body, bytes) else body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format, *args) -> None:  # noqa: A002 (http.server's name)
            log.debug("probe %s", format % args)

    server = _Server((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="worker-probes", daemon=True).start()
    return server
