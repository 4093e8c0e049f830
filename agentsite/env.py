"""Reading settings from the environment, strictly: a value that is not what
its setting takes stops the start with its name (settings.py uses these)."""

import json
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def junk(name: str, value: str, kind: str) -> ImproperlyConfigured:
    # An env file read by systemd keeps an inline comment as part of the
    # value: "HTTPS=1  # behind nginx" must stop the start, not read as off.
    return ImproperlyConfigured(
        f"{name}={value!r} is not {kind}: write comments on lines of their own "
        "(systemd keeps an inline '# …' as part of the value)"
    )


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word not in _TRUE | _FALSE:
        raise junk(name, value, "a boolean (1/0, true/false, yes/no, on/off)")
    return word in _TRUE


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if value.strip() == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise junk(name, value, "a whole number") from None
    if number < 0:
        raise ImproperlyConfigured(f"{name}={value!r} must be 0 or more")
    return number


def env_url(name: str, default: str = "") -> str:
    """A URL setting: no space or '#' in it (an inline comment kept by systemd)."""
    value = os.environ.get(name)
    if value is None:
        return default
    if any(c.isspace() or c == "#" for c in value.strip()):
        raise junk(name, value, "a URL")
    return value.strip()


def app(name: str):
    """An app setting from the environment, typed like its default
    (``sessions_app.conf.DEFAULTS``, the one place the defaults are written)."""
    from sessions_app.conf import DEFAULTS

    default = DEFAULTS[name]
    if isinstance(default, bool):
        return env_bool(name, default)
    if isinstance(default, list | dict):
        return type(default)(default)  # read with env_list, env_json
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    if isinstance(default, str) and name.endswith("_URL"):
        return env_url(name)
    try:
        return type(default)(raw)
    except ValueError:
        raise junk(name, raw, f"a {type(default).__name__}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_json(name: str, default):
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return json.loads(value)
    except ValueError:
        raise junk(name, value, "JSON") from None
