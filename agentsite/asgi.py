"""ASGI entry point: HTTP through Django, WebSockets through the session consumer.

The upgrade is refused (403) unless its Origin's host is in ALLOWED_HOSTS (a
missing Origin included); the user is the one of the session cookie.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from sessions_app.routing import (  # noqa: E402
    RuntimeStarter,
    install_graceful_shutdown,
    websocket_urlpatterns,
)

if settings.DEBUG or settings.SERVE_STATIC:
    # Plain daphne serves no static files; in production a proxy usually does.
    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)

application = RuntimeStarter(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": AllowedHostsOriginValidator(
                AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
            ),
        }
    )
)

install_graceful_shutdown()
