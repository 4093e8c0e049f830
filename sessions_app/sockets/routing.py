"""WebSocket URL patterns (the ASGI application is assembled in asgi.py)."""

from __future__ import annotations

from django.urls import path

from sessions_app.sockets.listing import SessionListConsumer
from sessions_app.sockets.session import SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/", SessionConsumer.as_asgi()),
    path("ws/list/", SessionListConsumer.as_asgi()),
]
