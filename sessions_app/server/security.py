"""The WebSocket upgrade's Origin check: same scheme, host and port, as CSRF.

Browsers send cookies with a WebSocket upgrade whatever page opened it, so the
Origin header is what stops another site (or another service on this host, on
another port) from opening sockets as the user. An upgrade is accepted only
when its Origin is exactly this site's own origin (the scheme the browser
used, the Host it asked for, that host allowed by ``ALLOWED_HOSTS``), or is
listed in ``CSRF_TRUSTED_ORIGINS``: the rule Django's CSRF check applies to
unsafe requests. Anything else, a missing Origin included, is refused with 403.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from sessions_app.conf import STATIC_DIR
from sessions_app.server.middleware import Middleware

log = logging.getLogger(__name__)


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


def _browser_scheme(scope) -> str:
    """http or https: what the page that opened this socket was served with."""
    secure = scope.get("scheme") == "wss"
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        # "HTTP_X_FORWARDED_PROTO" -> b"x-forwarded-proto"
        name = proxy[0].removeprefix("HTTP_").lower().replace("_", "-").encode()
        forwarded = _header(scope, name)
        if forwarded is not None:
            secure = forwarded.split(",")[0].strip() == proxy[1]
    return "https" if secure else "http"


def allowed_hosts() -> list[str]:
    """``ALLOWED_HOSTS`` as Django's own requests read it: with DEBUG and none
    listed, the local names (``HttpRequest.get_host``)."""
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return settings.ALLOWED_HOSTS


def origin_allowed(scope) -> bool:
    """Is this upgrade's Origin this site's own, or a trusted one?"""
    return refusal(scope) is None


def refusal(scope) -> str | None:
    """Why this upgrade is refused (for the log), or None if it is allowed."""
    origin = _header(scope, b"origin")
    if not origin or origin == "null":
        return "no Origin header"
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return None
    host = _header(scope, b"host")
    if not host:
        return "no Host header"
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, allowed_hosts()):
        return f"Host {host!r} is not in ALLOWED_HOSTS"
    parts = urlsplit(origin)
    expected = urlsplit(f"{_browser_scheme(scope)}://{host}")
    try:
        same = (parts.scheme, parts.hostname, parts.port) == (
            expected.scheme,
            expected.hostname,
            expected.port,
        )
    except ValueError:  # a port that is not a number
        same = False
    if not same:
        return (
            f"Origin {origin!r} is not this site's ({expected.scheme}://{host}) "
            "nor in CSRF_TRUSTED_ORIGINS"
        )
    return None


class SameOriginValidator:
    """ASGI middleware: refuse (403) WebSocket upgrades from any other origin."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        why = refusal(scope) if scope["type"] == "websocket" else None
        if why is not None:
            log.warning("refused a WebSocket upgrade to %r: %s", scope.get("path", ""), why)
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)


# The boot script (static/sessions_app/js/boot.js) is the one inline script: it must run
# even when the server died right after sending the page, so that no file of
# its own has to load. It is allowed by its hash, nothing else inline is.
BOOT_JS = (STATIC_DIR / "sessions_app" / "js" / "boot.js").read_text()
BOOT_JS_HASH = base64.b64encode(hashlib.sha256(BOOT_JS.encode()).digest()).decode()

# Same-origin ES modules and styles only: no inline script (but the boot
# script's hash) or style, no other origin, no framing. The admin (Django's own
# pages) is left to Django.
CONTENT_SECURITY_POLICY = (
    f"default-src 'self'; script-src 'self' 'sha256-{BOOT_JS_HASH}'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)


class ContentSecurityPolicyMiddleware(Middleware):
    """Adds ``Content-Security-Policy`` to every response outside the admin.
    Sync or async, as the stack around it is (under daphne: async, so a
    request needs no thread for it)."""

    def respond(self, request, response):
        if not request.path.startswith("/admin/"):
            response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response
