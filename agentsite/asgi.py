"""ASGI entry point: HTTP through Django, WebSockets through the session consumer.

The upgrade is refused (403) unless its Origin is this site's own origin
(scheme, host and port) or in CSRF_TRUSTED_ORIGINS (a missing Origin
included; see ``sessions_app.security``); the user is the one of the session
cookie.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from sessions_app.auth import PooledAuthMiddlewareStack  # noqa: E402
from sessions_app.routing import websocket_urlpatterns  # noqa: E402
from sessions_app.security import SameOriginValidator  # noqa: E402
from sessions_app.server import RuntimeStarter, install_daphne_hooks  # noqa: E402

if settings.DEBUG or settings.SERVE_STATIC:
    # Plain daphne serves no static files; in production a proxy usually does.
    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)

application = RuntimeStarter(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": SameOriginValidator(
                PooledAuthMiddlewareStack(URLRouter(websocket_urlpatterns))
            ),
        }
    )
)

install_daphne_hooks()
