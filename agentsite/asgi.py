"""ASGI entry point: HTTP through Django, WebSockets through the session consumer.

The upgrade is refused (403) unless its Origin is this site's own origin
(scheme, host and port) or in CSRF_TRUSTED_ORIGINS (a missing Origin
included; see ``sessions_app.server.security``); the user is the one of the session
cookie. ``sessions_app.asgi.application_for`` assembles it (the same call a
project embedding the app makes).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
django_asgi_app = get_asgi_application()

from sessions_app.asgi import application_for  # noqa: E402

# The probes answer whatever the Host (the runbook asks 127.0.0.1 directly).
application = application_for(django_asgi_app, probes=True)
