"""The package's metadata (pyproject.toml): the wheel carries every package
of the app; test_embedding.py builds it and runs a project on it."""

from __future__ import annotations

import tomllib

from tests.harness import ROOT


def test_the_wheel_lists_every_package_and_maps_the_templates_and_static_files():
    """pyproject.toml lists its packages (the templates and static files are
    mapped into the package, which discovery cannot do): every directory of
    sessions_app with an __init__.py, the two mapped folders and every folder
    under them (each with its files as package data; an unlisted one is a
    setuptools warning at every build). agentsite, the demo site, is not in
    the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "sessions_app").rglob("__init__.py")
    }
    mapped = {"sessions_app.templates": "templates", "sessions_app.static": "static"}
    data = {
        ".".join(("sessions_app", *folder.relative_to(ROOT).parts))
        for top in mapped.values()
        for folder in [ROOT / top, *(ROOT / top).rglob("*")]
        if folder.is_dir() and any(f.is_file() for f in folder.iterdir())
    }
    data |= set(mapped)
    assert set(config["packages"]) == found | data
    assert config["package-dir"] == mapped
    assert set(config["package-data"]) == data - {"sessions_app.templates"}
    assert config["dynamic"]["version"] == {"attr": "sessions_app.__version__"}


def test_the_version_has_its_changelog_entry():
    """``sessions_app.__version__`` (the wheel's version: pyproject.toml reads
    it) has an entry in docs/changelog.md."""
    import sessions_app

    changelog = (ROOT / "docs" / "changelog.md").read_text()
    assert f"\n## {sessions_app.__version__} (" in changelog


def test_the_runbooks_one_off_commands_read_the_env_file_as_systemd_does():
    """agents-manage (docs/deploy.md) runs under systemd with the units'
    EnvironmentFile=, never a shell sourcing it (where $, quotes and # in a
    secret read differently)."""
    runbook = (ROOT / "docs" / "deploy.md").read_text()
    body = runbook[
        runbook.index("agents-manage() {") : runbook.index(
            "\n}", runbook.index("agents-manage() {")
        )
    ]
    assert "--property=EnvironmentFile=/etc/agents/env" in body
    assert ". /etc/agents/env" not in runbook and "source /etc/agents/env" not in runbook
    for unit in ("agent-daphne@.service", "agent-worker@.service"):
        assert "EnvironmentFile=/etc/agents/env" in (ROOT / "deploy" / "systemd" / unit).read_text()


def test_the_runbooks_lock_file_is_uv_locks_export(tmp_path):
    """deploy/requirements.lock (what the runbook installs) is exactly what
    uv exports from uv.lock now: a change to the lock is exported too."""
    import shutil
    import subprocess

    uv = shutil.which("uv") or str(ROOT / ".venv" / "bin" / "uv")
    fresh = tmp_path / "requirements.lock"
    subprocess.run(
        [uv, "export", "--frozen", "--no-dev", "--no-emit-project", "--extra", "otel"]
        + ["--extra", "mcp", "-q", "-o", str(fresh)],
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    body = [line for line in fresh.read_text().splitlines() if not line.startswith("#")]
    shipped = (ROOT / "deploy" / "requirements.lock").read_text().splitlines()
    assert body == [line for line in shipped if not line.startswith("#")]
