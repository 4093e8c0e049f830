"""The agent rig: runs that last exactly as long as a test needs.

``Hold`` is the scripted agent's ``/hold NAME [MS]``: a run that streams
``held0 ``, ``held1 ``, … until the test calls ``release()``. It replaces a
timed ``/stream N MS`` guessed long enough, which ends early on a loaded
machine and turns a test's kill, cut or second tab into a race."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from django.conf import settings


class Hold:
    """A run busy until ``release()``: send ``text``; with ``pace`` (ms) it
    says something that often (traffic for the whole hold), else once a
    second. ``answer(text)`` checks a finished hold's text and counts it."""

    _ids = itertools.count(1)
    pending: list[Hold] = []  # released after each test (tests/conftest.py)

    def __init__(self, pace: int | None = None) -> None:
        self.name = f"h{os.getpid()}-{next(self._ids)}"
        self.text = f"/hold {self.name}" + (f" {pace}" if pace else "")
        Hold.pending.append(self)

    @classmethod
    def release_all(cls) -> None:
        """Release every hold a test made: one that failed before its release
        leaves no run streaming on a shared server for the tests after it."""
        while cls.pending:
            cls.pending.pop().release()

    @property
    def path(self) -> Path:
        """The file whose creation releases the hold (for a client that
        releases it itself, at a moment only it sees)."""
        return Path(settings.AGENT_TEST_HOLDS) / self.name

    def release(self) -> None:
        self.path.touch()

    def rearm(self) -> None:
        """Hold again: the same text sent again (a regenerate) streams until
        the next ``release()``."""
        self.path.unlink(missing_ok=True)

    @staticmethod
    def answer(text: str) -> int:
        """How many deltas a hold's ``text`` holds, asserting they are
        ``held0 `` … in order, each once: of text a client put together
        (deltas, a replay), that nothing was lost or said twice."""
        count = len(text.split())
        assert count > 0 and text == held(count), text
        return count


def held(count: int) -> str:
    """The text of a hold that said ``count`` deltas."""
    return "".join(f"held{i} " for i in range(count))
