"""WebSocket URL patterns (the ASGI application is assembled in asgi.py),
under ``AGENT_WEBSOCKET_PREFIX`` (the pages tell the client where)."""

from __future__ import annotations

from django.conf import settings
from django.urls import path

from sessions_app.sockets.listing import SessionListConsumer
from sessions_app.sockets.session import SessionConsumer

_PREFIX = settings.AGENT_WEBSOCKET_PREFIX

websocket_urlpatterns = [
    path(f"{_PREFIX}ws/sessions/", SessionConsumer.as_asgi()),
    path(f"{_PREFIX}ws/list/", SessionListConsumer.as_asgi()),
]
