"""sessions_app/checks.py: ``manage.py check`` names a bad app setting."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from tests.harness import ROOT


def _ids() -> dict[str, str]:
    return {m.id: m.msg for m in run_checks() if m.id and m.id.startswith("sessions_app.")}


def test_the_shipped_settings_pass():
    """The settings the project ships raise nothing of ours."""
    assert _ids() == {}


def test_a_misspelt_tool_is_named(settings):
    """A misspelt AGENT_TOOLS entry fails the check, named, before any run needs it."""
    settings.AGENT_TOOLS = [*settings.AGENT_TOOLS, "sessions_app.runtime.tools.WritFile"]
    assert "WritFile" in _ids()["sessions_app.E001"]
    with pytest.raises(SystemCheckError, match="WritFile"):
        call_command("check")


def test_an_agent_class_that_does_not_load_is_named(settings):
    """AGENT_CLASS that is no importable agent fails the check with its name."""
    settings.AGENT_CLASS = "my_project.agents.Missing"
    assert "my_project.agents.Missing" in _ids()["sessions_app.E002"]
    settings.AGENT_CLASS = "sessions_app.runtime.tools.WriteFile"  # loads, but no start()
    assert "has no start() or resume()" in _ids()["sessions_app.E002"]


def test_no_allowed_host_without_debug_warns(settings):
    """ALLOWED_HOSTS empty with DEBUG off would refuse every socket: a warning says so."""
    settings.DEBUG, settings.ALLOWED_HOSTS = False, []
    assert "every WebSocket upgrade" in _ids()["sessions_app.W001"]


def test_an_api_docs_page_without_its_assets_warns(settings):
    """Without drf_spectacular_sidecar the docs page would show nothing: a warning says so."""
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "drf_spectacular_sidecar"]
    assert "drf_spectacular_sidecar" in _ids()["sessions_app.W002"]


def test_a_server_does_not_start_on_a_misspelt_tool():
    """The ASGI application refuses to load with a bad AGENT_TOOLS entry, naming it."""
    env = {**os.environ, "SECRET_KEY": "x", "AGENT_TOOLS": "sessions_app.runtime.tools.WritFile"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", "import agentsite.asgi"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "sessions_app.E001 AGENT_TOOLS: cannot load 'sessions_app.runtime.tools.WritFile'" in (
        done.stderr
    )


@pytest.mark.parametrize("per_tool", [{"terminal": -1}, {"terminal": "5"}, ["terminal"]])
def test_gate_deadlines_that_are_not_seconds_are_named(settings, per_tool):
    """AGENT_GATE_DEADLINES maps tool names to seconds, 0 or more."""
    settings.AGENT_GATE_DEADLINES = per_tool
    assert "sessions_app.E004" in _ids()
