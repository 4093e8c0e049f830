"""The suites on each Django this project supports (pyproject.toml's range):
5.2 LTS and the current 6.x, which needs Python 3.12 or later.

    .venv/bin/nox -s "embedded(django='6.1')"      # what ./scripts/test runs
    .venv/bin/nox -s "production(django='6.1')"    # so is this (DATABASE_URL, REDIS_URL)
    .venv/bin/nox -s embedded                      # both Djangos

./scripts/test runs the 5.2 suites in .venv itself (both profiles, Chromium);
nox adds 6.x in virtualenvs of its own, without the browser tests: the
embedded suite (./scripts/test leaves out the tests marked slow), and the
production profile's own tests (the whole production suite on 6.x took 23
minutes beside the others, past CI's half hour; run it with
``nox -s "production(django='6.1')"``).
``python3.12`` must be on the PATH (./scripts/test puts pyenv's there).
"""

from __future__ import annotations

import os

import nox

nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True


@nox.session(python="3.12")
@nox.parametrize("django", ["5.2", "6.1"])
def embedded(session: nox.Session, django: str) -> None:
    """The embedded profile's server and runtime suite on Django ``django``."""
    session.install("-e", ".[test]", f"django~={django}.0")
    session.run("python", "-c", "import django; print('Django', django.get_version())")
    if os.environ.get("DATABASE_URL") or os.environ.get("REDIS_URL"):
        session.error("the embedded profile: run with DATABASE_URL and REDIS_URL unset")
    session.run("pytest", "-m", "not browser", *session.posargs)


@nox.session(python="3.12")
@nox.parametrize("django", ["5.2", "6.1"])
def production(session: nox.Session, django: str) -> None:
    """The production profile's server and runtime suite on Django
    ``django``, against ``DATABASE_URL`` and ``REDIS_URL`` (``-- -m 'postgres and not browser'``:
    only the tests that need the production profile, as ./scripts/test runs
    it)."""
    session.install("-e", ".[test]", f"django~={django}.0")
    session.run("python", "-c", "import django; print('Django', django.get_version())")
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        session.error("the production profile: set DATABASE_URL and REDIS_URL")
    session.run("pytest", "-m", "not browser", *session.posargs)
