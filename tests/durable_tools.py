"""A tool for the durable-run tests (docs/agents.md, "Tool calls and crashes"):
``slow_count`` marks that it started, takes about a second, then counts one
execution in the workspace. It is not idempotent, so a call whose outcome is
unknown must be asked again, never re-run blindly."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sessions_app.runtime.registry import Tool

SECONDS = 1.0


class SlowCount(Tool):
    name = "slow_count"
    description = "Count one execution, slowly (tests)."
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}

    def execute(self, args: dict[str, Any], workspace: Path) -> tuple[bool, str]:
        with open(workspace / "started.txt", "a") as out:
            out.write("started\n")
        time.sleep(SECONDS)  # sleep-ok: the tool's own work, not a synchronisation
        with open(workspace / "counts.txt", "a") as out:
            out.write("done\n")
        return True, "counted"


TOOLS = ",".join(
    [
        "sessions_app.runtime.tools.WriteFile",
        "sessions_app.runtime.tools.Terminal",
        "tests.durable_tools.SlowCount",
    ]
)


def lines(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0
