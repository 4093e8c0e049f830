"""The notes MCP server (``notes_server``) and the setting that names it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def servers(notes: Path) -> dict:
    """``AGENT_MCP_SERVERS`` for the notes server over stdio, writing to ``notes``."""
    return {
        "notes": {
            "command": [sys.executable, "-m", "tests.mcp.notes_server"],
            "env": {"NOTES_FILE": str(notes), "PYTHONPATH": str(ROOT)},
            "auto_approve": ["add"],
        }
    }
