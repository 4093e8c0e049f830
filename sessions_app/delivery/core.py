"""The delivery core: what a socket sends, and in what order, as pure code.

No asyncio, no Django, no Channels (a test holds the imports to that): the
objects here take in what happened (an event published live, a range sent, a
page read) and return what to do next, as actions the socket carries out:

- ``Send(text, seq)``: send this logged event's frame;
- ``Refill(after, upto)``: send the logged events ``after < seq <= upto`` (read
  from the log: a hole, or what did not fit in the live buffer);
- ``Compacted(first, last, run_id)``: send one ``compacted`` frame standing for
  the superseded events ``first..last``.

- ``End(reason)``: stop following (the log rebuilt, the session deleted, the
  reader's standing gone); each transport says it its own way.

``Phase`` is a reader's one state field and ``TRANSITIONS`` its declared moves
(``sockets.base.AppSocket.to`` refuses any other). ``Follower`` decides for
one reader of a session, socket or HTTP response alike, what each thing that
happens means: an event published, a rotation, a revocation, a read of the
tail; ``delivery.driver.Driver`` carries its answers out. ``Sequencer`` is
its order: replay after the cursor, live events parked meanwhile, then live
with no gap and no repeat. ``Batcher`` packs replayed frames into
``batch`` messages. ``interleave`` (``wire.ranges``) and ``contiguous`` walk
pages of the log for a compacted and a plain replay.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from sessions_app.wire import frames
from sessions_app.wire.ranges import Action, Compacted, Refill, Send, interleave

# The actions and the compacted walk are the wire's (``wire.ranges``: the SSE
# stream replays with them too); named here as well, where the socket looks.
__all__ = ["Action", "Compacted", "Refill", "Send", "interleave"]


@dataclass(frozen=True, slots=True)
class End:
    """Stop following, for ``reason`` (one of the three below)."""

    reason: str


# The session's log was rebuilt (its epoch rotated): the reader's cursor
# means nothing now. A socket closes 1013, a stream resets epoch_mismatch.
ROTATED = End("rotated")
# The session was deleted: a socket closes 1013 (its resume is told
# not_found), a stream resets not_found.
DELETED = End("deleted")
# The reader's standing ended (its user's rights, its key, its login): a
# socket closes 4403, a stream ends and its next request is refused.
REVOKED = End("revoked")

# What a reader carries out.
Step = Send | Refill | End


class Phase(enum.Enum):
    """Where a socket is in its life (one field; see ``TRANSITIONS``)."""

    CONNECTING = "connecting"  # accepted; its user is being looked up
    OPEN = "open"  # the user is let in (a session socket awaits its handshake)
    REPLAYING = "replaying"  # a range of the log is being sent; live events wait
    LIVE = "live"  # every published event goes out as it arrives
    CLOSING = "closing"  # a close was sent or the peer left: nothing more goes out


TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.CONNECTING: frozenset({Phase.OPEN, Phase.CLOSING}),
    Phase.OPEN: frozenset({Phase.REPLAYING, Phase.CLOSING}),
    Phase.REPLAYING: frozenset({Phase.LIVE, Phase.CLOSING}),
    Phase.LIVE: frozenset({Phase.CLOSING}),
    Phase.CLOSING: frozenset(),
}


class PhaseError(RuntimeError):
    """A transition the table does not declare: a bug, never a client's doing."""


def check_transition(current: Phase, new: Phase) -> bool:
    """Whether ``current -> new`` changes anything: ``False`` for a repeat of
    the same phase (closing twice is normal), ``PhaseError`` if undeclared."""
    if new is current:
        return False
    if new not in TRANSITIONS[current]:
        raise PhaseError(f"{current.value} -> {new.value} is not a declared transition")
    return True


class Sequencer:
    """A session socket's order of delivery.

    ``last_sent`` is the highest seq the client has been sent (everything
    ``<= last_sent`` went out, in order). While a replay runs, live events are
    ``hold``-ed: the first ``buffer_limit`` kept, the highest seq always
    remembered (what did not fit is read from the log afterwards). ``drain``
    then returns what to send of them, and ``live`` what to send for events
    that arrive when live: nothing (a repeat), the frame, or a refill of the
    hole before it and then the frame. The reader reports what it sent with
    ``sent``; a refill that came back short (the reader closed) ends a drain.
    """

    def __init__(self, buffer_limit: int) -> None:
        self.buffer_limit = buffer_limit
        self.last_sent = 0
        self.held: list[tuple[int, str]] = []
        self.held_high = 0

    def attach(self, after: int) -> None:
        """The handshake's cursor: the client has everything up to ``after``."""
        self.last_sent = after

    def sent(self, seq: int) -> None:
        """Everything up to ``seq`` went out (never moves back)."""
        if seq > self.last_sent:
            self.last_sent = seq

    def hold(self, seq: int, text: str) -> None:
        """A live event that arrived during a replay."""
        if seq > self.held_high:
            self.held_high = seq
        if len(self.held) < self.buffer_limit:
            self.held.append((seq, text))

    def live(self, events: Iterable[tuple[int, str]]) -> list[Action]:
        """What to send for events published live, in seq order (the reader
        is live): each one's frame, a repeat dropped, a hole refilled first."""
        return self._steps(events, self.last_sent)

    def drain(self) -> list[Action]:
        """What to send of the events held during the replay, in order, without
        repeats, with the holes and the overflow refilled; empty once nothing
        is held (the socket may go live)."""
        held, self.held = self.held, []
        steps = self._steps(sorted(held), self.last_sent)
        cursor = max([self.last_sent] + [_last(step) for step in steps])
        if self.held_high > cursor:
            steps.append(Refill(cursor, self.held_high))
        return steps

    @staticmethod
    def _steps(events: Iterable[tuple[int, str]], cursor: int) -> list[Action]:
        steps: list[Action] = []
        for seq, text in events:
            if seq <= cursor:
                continue  # a repeat: sent already (replayed, or refilled)
            if seq > cursor + 1:
                # A hole: a publication was lost (a full channel) or overtaken;
                # seqs commit in order, so the missing events are readable.
                steps.append(Refill(cursor, seq - 1))
            steps.append(Send(text, seq))
            cursor = seq
        return steps


def _last(step: Action) -> int:
    return step.seq if isinstance(step, Send) else step.upto if isinstance(step, Refill) else 0


class Follower:
    """What each thing that happens means to one reader of a session, as the
    steps to carry out (``Step``). ``order`` is the reader's ``Sequencer``;
    ``epoch`` the epoch it follows (its handshake's or its request's)."""

    def __init__(self, buffer_limit: int, epoch: str | None = None) -> None:
        self.order = Sequencer(buffer_limit)
        self.epoch = epoch

    def published(self, events: Iterable[tuple[int, str]], holding: bool) -> list[Step]:
        """Events published live, in seq order: held while a replay runs
        (``holding``; ``drained`` sends them after), else each one's frame,
        a repeat dropped and a hole refilled from the log first."""
        if holding:
            for seq, text in events:
                self.order.hold(seq, text)
            return []
        return self.order.live(events)

    def drained(self) -> list[Step]:
        """After a replay: the events held meanwhile (``Sequencer.drain``);
        empty once nothing is held, and the reader may go live."""
        return self.order.drain()

    def rotated(self, epoch: str | None) -> list[Step]:
        """The session's epoch is now ``epoch`` (its rotation's message, or a
        read of its head): the end, unless it is the epoch followed (a late
        message), or none was answered yet."""
        if self.epoch is None or epoch == self.epoch:
            return []
        return [ROTATED]

    def revoked(self) -> list[Step]:
        """The reader's standing ended (its rights, its key or its login)."""
        return [REVOKED]

    def tail(self, head: tuple[int, str, int] | None, standing: bool | None) -> list[Step]:
        """A read of the session's head, epoch and compacted point (None: the
        session is gone), and of the reader's standing when it was asked
        (None: not read this time): the end (the standing gone first, then
        the session, then its log rebuilt), or the events committed but
        never published, read from the log."""
        if standing is False:  # first: the rights gone say more than the session
            return [REVOKED]
        if head is None:
            return [DELETED]
        ended = self.rotated(head[1])
        if ended:
            return ended
        if head[0] > self.order.last_sent:
            return [Refill(self.order.last_sent, head[0])]
        return []


class Batcher:
    """Replayed frames packed into ``batch`` messages of at most ``max_frames``
    frames or ``max_chars`` characters: ``add`` returns a message when one is
    full, ``flush`` the rest (``None`` when nothing waits)."""

    def __init__(self, max_frames: int, max_chars: int) -> None:
        self.max_frames = max_frames
        self.max_chars = max_chars
        self.texts: list[str] = []
        self.chars = 0

    def add(self, text: str) -> str | None:
        self.texts.append(text)
        self.chars += len(text)
        if len(self.texts) >= self.max_frames or self.chars >= self.max_chars:
            return self.flush()
        return None

    def flush(self) -> str | None:
        if not self.texts:
            return None
        text = frames.batch_text(self.texts)
        self.texts, self.chars = [], 0
        return text


class LogHole(Exception):
    """A page of the log does not follow on from the cursor: events were purged
    under a replay. Never skipped silently: the socket closes (1013) and the
    client is told what happened when it resumes."""

    def __init__(self, cursor: int) -> None:
        super().__init__(cursor)
        self.cursor = cursor


def contiguous(cursor: int, page: Iterable[tuple[str, int]]) -> Iterator[Send]:
    """The page's frames as ``Send``s, each exactly one past the one before;
    ``LogHole`` at the first that is not."""
    for text, seq in page:
        if seq != cursor + 1:
            raise LogHole(cursor)
        yield Send(text, seq)
        cursor = seq
