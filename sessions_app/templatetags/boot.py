"""``{% boot_script %}``: the boot script inline (see security.BOOT_JS)."""

from django import template
from django.utils.safestring import mark_safe

from sessions_app.server.security import BOOT_JS

register = template.Library()


@register.simple_tag
def boot_script():
    """The page's first script, inline: it must run even if no file loads."""
    return mark_safe(f"<script>{BOOT_JS}</script>")  # noqa: S308 (our own file, hashed in the CSP)
