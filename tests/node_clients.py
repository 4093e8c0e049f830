"""The node clients nobody here wrote (``tests/clients``: the ``ai``
package's chat, ``@ag-ui/client``'s ``HttpAgent``), pinned by its lock file:
whether they are installed, and one run of a client script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.harness import ROOT

CLIENTS = ROOT / "tests" / "clients"


def clients_installed(package: str) -> None:
    """Skip loudly where the pinned node clients are not installed (CI installs
    them: a missing one fails there)."""
    if shutil.which("node") is None or not (CLIENTS / "node_modules" / package).is_dir():
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail("tests/clients is not installed: run npm ci --prefix tests/clients")
        pytest.skip(f"!! {package} is not installed: npm ci --prefix tests/clients")


def run_node(script: str, *args: str) -> dict:
    """Run a node client of ``tests/clients`` (its package installed, else a
    loud skip); the JSON report it prints last."""
    done = subprocess.run(
        ["node", str(CLIENTS / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
