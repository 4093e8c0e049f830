"""``{% boot_script %}``: the boot script inline (see security.BOOT_JS);
``{% client_urls %}``: the app's routes for the browser client."""

import contextlib
import json

from django import template
from django.conf import settings
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from sessions_app.server.security import BOOT_JS

register = template.Library()


@register.simple_tag
def boot_script():
    """The page's first script, inline: it must run even if no file loads."""
    return mark_safe(f"<script>{BOOT_JS}</script>")  # noqa: S308 (our own file, hashed in the CSP)


@register.simple_tag
def client_urls():
    """``data-urls`` for ``<body>``: where the browser client finds the app's
    routes (static/sessions_app/js/client/urls.js), from Django's routing and
    ``AGENT_WEBSOCKET_PREFIX``, so the app can be mounted under any prefix.
    A route the project did not include (the API) is left out."""
    placeholder = "SESSION_ID"
    urls = {
        "list": reverse("sessions_app:list"),
        "session": reverse("sessions_app:session", args=[placeholder]),
    }
    with contextlib.suppress(NoReverseMatch):
        urls["api_session"] = reverse("api-session", kwargs={"session_id": placeholder})
    ws = "/" + settings.AGENT_WEBSOCKET_PREFIX
    urls["ws_sessions"] = ws + "ws/sessions/"
    urls["ws_list"] = ws + "ws/list/"
    return format_html('data-urls="{}"', json.dumps(urls, separators=(",", ":")))
