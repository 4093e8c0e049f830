"""The patches' common ground: the versions whose internals were read
(``PINNED``), what failed (``failures``, ``report``), and how a check reads a
third-party member (``source_of``) and knows a wrapper as ours (``mark``)."""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from sessions_app.server import metrics

log = logging.getLogger("sessions_app.server.patches")

# The versions whose internals were read and tested (pyproject.toml pins them).
PINNED = {
    "daphne": "4.2.3",
    "twisted": "26.10.0",
    "autobahn": "26.11.1",
    "channels": "4.3.2",
    "channels-redis": "4.3.0",
}


class PatchFailed(ImproperlyConfigured):
    """A patch of a third-party internal did not take hold."""


# name -> what went wrong, for every check that failed in this process.
failures: dict[str, str] = {}


def report(name: str, problem: str, *, starting: bool = True) -> None:
    """A patch did not take hold: refuse to run (only while ``starting``: a
    server already serving cannot refuse), or say so loudly."""
    failures[name] = problem
    message = (
        f"the {name} patch did not take hold: {problem} "
        f"(versions tested: {', '.join(f'{k} {v}' for k, v in PINNED.items())})"
    )
    metrics.PATCH_FAILURES.labels(name).inc()
    if starting and settings.AGENT_PATCH_FAILURES == "refuse":
        raise PatchFailed(message + "; set AGENT_PATCH_FAILURES=warn to run without it")
    log.error("%s: running WITHOUT it", message)


def source_of(obj, assumed: str) -> str:
    """``obj``'s source, to look for the members a patch reads; where the
    sources are not installed (bytecode only), ``assumed`` (the check cannot
    look, and says so once in the log)."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        log.warning("no source for %r: its members are assumed, not checked", obj)
        return assumed


def check_versions() -> list[str]:
    """The pinned packages installed at another version (logged, not refused:
    the member checks decide)."""
    drift = []
    for package, version in PINNED.items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed != version:
            drift.append(f"{package} {installed} (tested: {version})")
    if drift:
        log.warning("third-party versions differ from the tested ones: %s", ", ".join(drift))
    return drift


def mark(function: Any) -> Any:
    """Mark a wrapper as ours (what the checks look for)."""
    function._sessions_app = True
    return function


def is_ours(function: Any) -> bool:
    return getattr(function, "_sessions_app", False)
