"""Tool calls' journal: what makes a file write idempotent by call id.

Before ``write_file`` appends for a call, it records the file's size under the
call's id. Run again for the same call (its worker stopped while it ran, so
whether it took effect is unknown), it cuts the file back to that size first:
the file ends as after one append, however many attempts there were. The
journal lives beside the workspaces, not in them (the agent's tools never see
it), one directory per session, removed with its workspace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

_CALL_ID = re.compile(r"call_[A-Za-z0-9_-]{1,64}")


def journal_dir(workspace: Path) -> Path:
    return workspace.parent / ".calls" / workspace.name


def size_before(workspace: Path, call_id: str, size_now: int) -> int:
    """The file's size before the first attempt of ``call_id`` (recording
    ``size_now`` if this is the first)."""
    if not _CALL_ID.fullmatch(call_id):
        return size_now
    folder = journal_dir(workspace)
    entry = folder / call_id
    try:
        return int(json.loads(entry.read_text())["size"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = folder / f".{call_id}.tmp"
    with open(temp, "w") as out:
        json.dump({"size": size_now}, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, entry)
    return size_now


def remove_journal(workspace: Path) -> None:
    shutil.rmtree(journal_dir(workspace), ignore_errors=True)
