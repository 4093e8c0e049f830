"""The package's metadata (pyproject.toml): the wheel carries every package
of the app; test_embedding.py builds it and runs a project on it."""

from __future__ import annotations

import tomllib

from tests.harness import ROOT


def test_the_wheel_lists_every_package_and_maps_the_templates_and_static_files():
    """pyproject.toml lists its packages (the templates and static files are
    mapped into the package, which discovery cannot do): the list is every
    directory of agentsite and sessions_app with an __init__.py, and the two
    mapped ones."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("agentsite", "sessions_app")
        for init in (ROOT / top).rglob("__init__.py")
    }
    mapped = {
        "sessions_app.bundled_templates": "templates",
        "sessions_app.bundled_static": "static",
    }
    assert set(config["packages"]) == found | set(mapped)
    assert config["package-dir"] == mapped
