"""How a range of the log goes out, as pure code: the actions a replay
carries out and the walk of a compacted replay over pages of the log. Shared
by the session socket (``delivery.core``) and the SSE stream
(``web.stream``).

- ``Send(text, seq)``: send this logged event's frame;
- ``Refill(after, upto)``: send the logged events ``after < seq <= upto``;
- ``Compacted(first, last, run_id)``: send one ``compacted`` frame standing for
  the superseded events ``first..last``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from sessions_app.wire import frames


@dataclass(frozen=True, slots=True)
class Send:
    text: str
    seq: int


@dataclass(frozen=True, slots=True)
class Refill:
    after: int
    upto: int


@dataclass(frozen=True, slots=True)
class Compacted:
    first: int
    last: int
    run_id: str

    def text(self, session_id: str) -> str:
        return frames.dumps(frames.compacted_frame(session_id, self.first, self.last, self.run_id))


Action = Send | Refill | Compacted


def interleave(
    cursor: int,
    page: Iterable[tuple[str, int]],
    superseded: Mapping[int, tuple[int, str]],
) -> Iterator[Action]:
    """A compacted replay's steps over one page of the skeleton (the events that
    are not deltas): between two of its frames either one ``Compacted`` (the
    gap is exactly a superseded stretch, ``superseded[first] = (last, run_id)``)
    or a ``Refill`` (the deltas kept: a run still streaming, or a stretch the
    plan did not cover)."""
    for text, seq in page:
        if seq > cursor + 1:
            stretch = superseded.get(cursor + 1)
            if stretch is not None and stretch[0] == seq - 1:
                yield Compacted(cursor + 1, seq - 1, stretch[1])
            else:
                yield Refill(cursor, seq - 1)
        yield Send(text, seq)
        cursor = seq
