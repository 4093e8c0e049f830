"""The delivery core: what a socket sends, and in what order, as pure code.

No asyncio, no Django, no Channels (a test holds the imports to that): the
objects here take in what happened (an event published live, a range sent, a
page read) and return what to do next, as actions the socket carries out:

- ``Send(text, seq)``: send this logged event's frame;
- ``Refill(after, upto)``: send the logged events ``after < seq <= upto`` (read
  from the log: a hole, or what did not fit in the live buffer);
- ``Compacted(first, last, run_id)``: send one ``compacted`` frame standing for
  the superseded events ``first..last``.

``Phase`` is a socket's one state field and ``TRANSITIONS`` its declared moves
(``sockets.base.AppSocket.to`` refuses any other). ``Sequencer`` keeps a
session socket's order: replay after the cursor, live events parked meanwhile,
then live with no gap and no repeat. ``Batcher`` packs replayed frames into
``batch`` messages. ``interleave`` (``wire.ranges``) and ``contiguous`` walk
pages of the log for a compacted and a plain replay.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping

from sessions_app.wire import frames
from sessions_app.wire.ranges import Action, Compacted, Refill, Send, interleave

# The actions and the compacted walk are the wire's (``wire.ranges``: the SSE
# stream replays with them too); named here as well, where the socket looks.
__all__ = ["Action", "Compacted", "Refill", "Send", "interleave"]


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


# ``Sequencer.before``'s answer for an event sent already.
REPEAT = True


class Sequencer:
    """A session socket's order of delivery.

    ``last_sent`` is the highest seq the client has been sent (everything
    ``<= last_sent`` went out, in order). While a replay runs, live events are
    ``hold``-ed: the first ``buffer_limit`` kept, the highest seq always
    remembered (what did not fit is read from the log afterwards). ``drain``
    then returns what to send of them, and ``live`` what to send for an event
    that arrives when live: nothing (a repeat), the frame, or a refill of the
    hole before it and then the frame. The socket reports what it sent with
    ``sent``; a refill that came back short (the socket closed) ends a drain.
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

    def live(self, seq: int, text: str) -> list[Action]:
        """What to send for a live event (the socket is live)."""
        return self._steps([(seq, text)], self.last_sent)

    def before(self, seq: int) -> Refill | None | bool:
        """``live``'s answer without building it, for the hot path (one call
        per event per socket): ``REPEAT`` (send nothing), ``None`` (send the
        frame), or the ``Refill`` that must go out before it."""
        if seq <= self.last_sent:
            return REPEAT
        if seq > self.last_sent + 1:
            return Refill(self.last_sent, seq - 1)
        return None

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
