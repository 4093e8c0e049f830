"""Tool calls' journal (sessions_app/runtime/journal.py): a call run again
appends once, and a stalled holder of the run, whose lease a newer one took,
never adds an effect, whichever of the two reaches the file first."""

from __future__ import annotations

import threading

import pytest

from sessions_app.runtime import journal
from sessions_app.runtime.tools import WriteFile

CALL = "call_fenced1"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "ws" / "s_1"
    root.mkdir(parents=True)
    return root


def write(workspace, generation: int, text: str) -> tuple[bool, str]:
    with journal.fenced(generation):
        return WriteFile().execute_call({"path": "out.txt", "text": text}, workspace, CALL)


def test_a_call_run_again_by_its_new_holder_appends_once(workspace):
    """Attempts of one call by successive holders (generations 1, 2, 3): the
    file holds the call's line once."""
    for generation in (1, 2, 3):
        assert write(workspace, generation, "hello")[0]
    assert (workspace / "out.txt").read_text() == "hello\n"


def test_a_stalled_holder_waking_after_the_new_one_writes_nothing(workspace):
    """The new holder (generation 2) ran the call; the stalled one (1) wakes
    and tries: refused, and the file is as the new holder left it."""
    assert write(workspace, 2, "hello")[0]
    ok, output = write(workspace, 1, "hello")
    assert not ok and "lost the run" in output
    assert (workspace / "out.txt").read_text() == "hello\n"


def test_a_holder_frozen_inside_its_attempt_holds_the_new_one_back(workspace):
    """The stalled holder froze while it held the call's lock, mid-attempt:
    the new holder waits for it, then cuts its line back and appends its
    own, once."""
    target = workspace / "out.txt"
    target.write_text("before\n")
    entered, thaw = threading.Event(), threading.Event()
    done: list = []

    def stalled() -> None:
        with journal.fenced(1), journal.attempt(workspace, CALL, lambda: target.stat().st_size):
            entered.set()
            thaw.wait(10)  # frozen, holding the lock
            with open(target, "a") as f:
                f.write("hello\n")

    holder = threading.Thread(target=stalled)
    holder.start()
    assert entered.wait(10)
    newer = threading.Thread(target=lambda: done.append(write(workspace, 2, "hello")))
    newer.start()
    newer.join(0.5)
    assert newer.is_alive(), "the new holder waits for the lock"
    thaw.set()
    holder.join(10)
    newer.join(10)
    assert done[0][0], done
    assert target.read_text() == "before\nhello\n"
