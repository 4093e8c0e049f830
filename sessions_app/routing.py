"""WebSocket URL patterns (the ASGI application is assembled in agentsite/asgi.py)."""

from __future__ import annotations

from django.urls import path

from .consumers import SessionConsumer

websocket_urlpatterns = [path("ws/sessions/", SessionConsumer.as_asgi())]
