"""The ASGI application around a project's Django HTTP app: one call.

``agentsite/asgi.py`` uses it, and so does a project that embeds the app
(docs/embedding.md)::

    django_asgi_app = get_asgi_application()
    from sessions_app.asgi import application_for
    application = application_for(django_asgi_app)

WebSocket upgrades go to the session and list sockets (``routing.py``), only
from this site's own origin or CSRF_TRUSTED_ORIGINS, with the user of the
session cookie; HTTP goes to Django (with the static files in front when
DEBUG or SERVE_STATIC); the embedded runtime starts with the first request;
the access log (``server.access_log``) sees every request and socket.
"""

from __future__ import annotations

import functools

from channels.routing import ProtocolTypeRouter, URLRouter
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from sessions_app.access.auth import PooledAuthMiddlewareStack, routes_matcher
from sessions_app.delivery import transport
from sessions_app.runtime import executor
from sessions_app.runtime.starter import RuntimeStarter
from sessions_app.server import patches
from sessions_app.server.access_log import AccessLog, drop_daphnes_duplicates
from sessions_app.server.patches import daphne_buffer
from sessions_app.server.probe_routes import Probes
from sessions_app.server.security import SameOriginValidator
from sessions_app.server.static import StaticFiles
from sessions_app.sockets import rows
from sessions_app.sockets.routing import websocket_urlpatterns


def websocket_application(routes=()):
    """The app's WebSocket routes, after ``routes`` (a project's own), behind
    the Origin check and the cookie's user. The app's own consumers answer
    the upgrade before the user is looked up (``auth.user_of``); a project's
    get it resolved first, as with Channels' ``AuthMiddlewareStack``."""
    routes = list(routes)  # read twice below
    return SameOriginValidator(
        PooledAuthMiddlewareStack(
            URLRouter([*routes, *websocket_urlpatterns]),
            defer=routes_matcher(websocket_urlpatterns, before=routes),
        )
    )


def refuse_bad_settings() -> None:
    """A server does not start on a bad app setting (``sessions_app.checks``):
    ``ImproperlyConfigured`` names it, rather than the first run failing."""
    from sessions_app.checks import agent_settings

    errors = [m for m in agent_settings() if m.is_serious()]
    if errors:
        raise ImproperlyConfigured("; ".join(f"{m.id} {m.msg}" for m in errors))


def application_for(
    django_asgi_app,
    *,
    websocket_routes=(),
    serve_static: bool | None = None,
    probes: bool = False,
):
    """The whole ASGI application: ``django_asgi_app`` for HTTP, the app's
    sockets (and ``websocket_routes``, a project's own, matched first) for
    WebSockets. ``serve_static`` defaults to DEBUG or SERVE_STATIC (plain
    daphne serves no static files; in production a proxy usually does).
    ``probes``: ``/healthz`` and ``/readyz`` answered ahead of Django,
    whatever the Host (``server.probe_routes``); a probe starts the runtime
    as any request does."""
    refuse_bad_settings()
    if serve_static is None:
        serve_static = settings.DEBUG or getattr(settings, "SERVE_STATIC", False)
    http = StaticFiles(django_asgi_app) if serve_static else django_asgi_app
    if probes:
        http = Probes(http)
    application = AccessLog(
        RuntimeStarter(
            ProtocolTypeRouter({"http": http, "websocket": websocket_application(websocket_routes)})
        )
    )
    install_patches()
    drop_daphnes_duplicates()
    _import_channel_layer()
    return application


def install_patches() -> None:
    """Apply and check every third-party patch (``server.patches``), with the
    graceful stop's hooks: hand back the runs this process executes, then flush
    the sockets' rows. Once per process; ``application_for`` calls it."""
    # Runs executing here (embedded) go back to the queue at their last
    # checkpoint, for the next start-up to enqueue (docs/agents.md).
    patches.install(
        buffer_extension=transport.SEND_BUFFER_EXTENSION,
        on_stop=functools.partial(executor.abort_all, enqueue=False),
        drain=rows.flush,
    )
    # delivery's interface to the server, implemented by daphne's adapter.
    transport.plug(gone=daphne_buffer.PEER_GONE, unreadable=daphne_buffer.unreadable)


def _import_channel_layer() -> None:
    """Import the channel layer's module with the server, not at its first
    socket: channels_redis and redis take ~0.3 s to import, which the first
    clients of a restarted server would otherwise wait for."""
    backend = settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND")
    if backend:
        import_string(backend)
