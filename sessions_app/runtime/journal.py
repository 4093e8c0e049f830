"""Tool calls' journal: what makes a file write idempotent by call id.

Before ``write_file`` appends for a call, it records the file's size under the
call's id. Run again for the same call (its worker stopped while it ran, so
whether it took effect is unknown), it cuts the file back to that size first:
the file ends as after one append, however many attempts there were. The
journal lives beside the workspaces, not in them (the agent's tools never see
it), one directory per session, removed with its workspace.

**Fencing.** A worker that stalls (a freeze, a pause of its host) loses its
lease, and another takes the run over and runs the call again; the first may
wake and write after it. So an attempt is made under an exclusive lock of
its call's entry, with its holder's lease generation (``fenced``: the run's
``lease_generation`` of that drive), and the entry keeps the highest that
acted: an attempt from an older holder is refused (``StaleHolder``) and
changes nothing. Whichever order the two take the lock in, the file ends as
after one append: the newer truncates what the older wrote, or the older
finds the newer's generation and writes nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

_CALL_ID = re.compile(r"call_[A-Za-z0-9_-]{1,64}")


def journal_dir(workspace: Path) -> Path:
    return workspace.parent / ".calls" / workspace.name


class StaleHolder(Exception):
    """A newer holder of the run has made this call's attempt: this one, from
    a worker that lost its lease, must not take effect."""


class CallBusy(Exception):
    """Another attempt of this call (a stalled worker's, frozen inside it)
    held its lock for ``LOCK_WAIT_SECONDS``: whether it takes effect is
    unknown, and this attempt makes none."""


# How long an attempt waits for an older one that holds the call's lock.
LOCK_WAIT_SECONDS = 30.0


_fence: ContextVar[int | None] = ContextVar("journal_fence", default=None)


@contextmanager
def fenced(generation: int) -> Iterator[None]:
    """Tool calls made meanwhile are attempts of the holder of this lease
    generation."""
    token = _fence.set(generation)
    try:
        yield
    finally:
        _fence.reset(token)


@contextmanager
def attempt(workspace: Path, call_id: str, size_now: Callable[[], int]) -> Iterator[int]:
    """One attempt of ``call_id`` on a file whose size ``size_now()`` reads
    (under the lock: an older holder may have written while this one
    waited): the size to cut it back to (its size before the first attempt),
    while the call's lock is held; ``StaleHolder`` if a newer lease
    generation has made an attempt. Without a call id nothing is journaled."""
    if not _CALL_ID.fullmatch(call_id):
        yield size_now()
        return
    folder = journal_dir(workspace)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    mine = _fence.get()
    with open(folder / f".{call_id}.lock", "a") as lock:
        _lock(lock, call_id)
        entry = _read(folder / call_id)
        if entry is not None and mine is not None and int(entry.get("fence") or 0) > mine:
            raise StaleHolder(call_id)
        size = int(entry["size"]) if entry is not None else size_now()
        if entry is None or (mine is not None and mine > int(entry.get("fence") or 0)):
            _write(folder, call_id, {"size": size, "fence": mine or 0})
        yield size


def _lock(lock, call_id: str) -> None:
    """The call's exclusive lock, waited for at most ``LOCK_WAIT_SECONDS``
    (a holder frozen inside its attempt must not hold the run for ever)."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise CallBusy(call_id) from None
            time.sleep(0.05)


def _read(entry: Path) -> dict | None:
    try:
        found = json.loads(entry.read_text())
        int(found["size"])
        return found
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(folder: Path, call_id: str, entry: dict) -> None:
    temp = folder / f".{call_id}.tmp"
    with open(temp, "w") as out:
        json.dump(entry, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, folder / call_id)


def remove_journal(workspace: Path) -> None:
    shutil.rmtree(journal_dir(workspace), ignore_errors=True)
