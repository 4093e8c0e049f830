"""The log as a reader follows it, on the sockets' database pool (``db_pool``).

Every transport reads the same way: the replay's pages (plain, or the
skeleton of a compacted replay), the superseded stretches it skips, and the
session's head, epoch and compacted point (the tail check, with the user's
rights in the same trip when asked). Each call is self-contained, and each
of the pool's threads keeps one persistent connection.
"""

from __future__ import annotations

from sessions_app.access.rights import still_granted
from sessions_app.log.compaction import compacted_plan
from sessions_app.log.events import read_frames
from sessions_app.models import AgentSession
from sessions_app.server.db_pool import reading_in_db_pool

REPLAY_PAGE = 500
# The resume's first page, read with its check: short, so that a long
# replay's resume_ok does not wait for a full page.
FIRST_PAGE = 50


@reading_in_db_pool
def events_page(session_id: str, after: int, upto: int) -> list[tuple[str, int]]:
    """Up to ``REPLAY_PAGE`` event frames' texts after ``after``, with their seqs."""
    return read_frames(session_id, after, upto, REPLAY_PAGE)


@reading_in_db_pool
def skeleton_page(session_id: str, after: int, upto: int) -> list[tuple[str, int]]:
    """Up to ``REPLAY_PAGE`` frames of the events after ``after`` that are not deltas."""
    return read_frames(session_id, after, upto, REPLAY_PAGE, skeleton=True)


@reading_in_db_pool
def replay_plan(session_id: str, after: int, upto: int) -> list[tuple[int, int, str]]:
    """The superseded stretches a compacted replay of ``after < seq <= upto`` skips."""
    return compacted_plan(session_id, after, upto)


def head_row(session_id: str) -> tuple[int, str, int] | None:
    """``head_of`` inside a call already on the pool (one trip for several reads)."""
    return _head(session_id)


def _head(session_id: str) -> tuple[int, str, int] | None:
    return (
        AgentSession.objects.filter(id=session_id)
        .values_list("head", "epoch", "compacted_through")
        .first()
    )


@reading_in_db_pool
def head_of(session_id: str) -> tuple[int, str, int] | None:
    """The session's head, epoch and compacted_through (None once it is deleted)."""
    return _head(session_id)


@reading_in_db_pool
def tail_state(
    session_id: str, granted: tuple[int, str] | None
) -> tuple[tuple[int, str, int] | None, bool | None]:
    """``head_of`` for the tail check, and whether the reader's user still has
    the rights it was let in with, when asked (``granted``), in the same trip
    to the pool."""
    return _head(session_id), None if granted is None else still_granted(granted)
