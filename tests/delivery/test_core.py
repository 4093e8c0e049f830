"""The delivery core (sessions_app/delivery/core.py): pure, no sockets.

A small simulated socket carries out the actions against a log of seqs and
records what the client received; every test checks that list exactly.
"""

from __future__ import annotations

import ast
import itertools
import json
import random
from pathlib import Path

import pytest

from sessions_app.delivery import core as d
from sessions_app.delivery.core import (
    Batcher,
    Compacted,
    LogHole,
    Phase,
    PhaseError,
    Refill,
    Send,
    Sequencer,
)


def text(seq: int) -> str:
    return f'{{"seq":{seq}}}'


class Client:
    """Carries out a sequencer's actions against a log of 1..head; records the
    seqs the client is sent."""

    def __init__(self, sequencer: Sequencer) -> None:
        self.sequencer = sequencer
        self.got: list[int] = []

    def run(self, actions) -> None:
        for action in actions:
            if isinstance(action, Refill):
                self.got.extend(range(action.after + 1, action.upto + 1))
                self.sequencer.sent(action.upto)
            else:
                assert isinstance(action, Send)
                self.got.append(action.seq)
                self.sequencer.sent(action.seq)

    def replay(self, after: int, head: int) -> None:
        self.got.extend(range(after + 1, head + 1))
        self.sequencer.sent(head)

    def drain(self) -> None:
        while actions := self.sequencer.drain():
            self.run(actions)


def test_live_in_order_sends_each_once():
    """Live events in order go out one by one, each exactly once."""
    seq = Sequencer(buffer_limit=10)
    client = Client(seq)
    for n in (1, 2, 3):
        client.run(seq.live([(n, text(n))]))
    client.run(seq.live([(2, text(2))]))  # a repeat (a refill sent it already)
    assert client.got == [1, 2, 3]
    assert seq.live([(3, text(3))]) == []


def test_hole_is_refilled_before_the_frame():
    """A live event past a hole: the hole is read from the log first, then the
    frame; the client sees no gap."""
    seq = Sequencer(buffer_limit=10)
    seq.attach(4)
    assert seq.live([(8, text(8))]) == [Refill(4, 7), Send(text(8), 8)]
    client = Client(seq)
    client.run(seq.live([(8, text(8))]))
    assert client.got == [5, 6, 7, 8]


def test_short_refill_stops_the_drain():
    """A refill that came back short (the socket closed) leaves last_sent where
    the range stopped: nothing past it is counted as sent."""
    seq = Sequencer(buffer_limit=10)
    seq.attach(2)
    actions = seq.live([(9, text(9))])
    assert actions[0] == Refill(2, 8)
    seq.sent(5)  # the range stopped at 5
    assert seq.last_sent == 5
    assert seq.live([(9, text(9))])[0] == Refill(5, 8)


@pytest.mark.parametrize("head", [0, 1, 5])
@pytest.mark.parametrize("live", [[], [1], [3, 4], [5, 6, 7], [6, 8], [2, 9, 7, 8]])
def test_replay_then_live_every_boundary(head, live):
    """Events published during the replay, before, at and after its head, in any
    order: the client gets 1..max exactly once, in order."""
    seq = Sequencer(buffer_limit=10)
    client = Client(seq)
    for n in live:
        seq.hold(n, text(n))
    client.replay(0, head)
    client.drain()
    top = max([head, *live])
    assert client.got == list(range(1, top + 1))
    assert seq.drain() == []


def test_overflow_past_the_live_buffer_is_read_from_the_log():
    """More live events than the buffer holds: the first are kept, the highest
    seq remembered, the rest refilled from the log; nothing lost or repeated."""
    seq = Sequencer(buffer_limit=3)
    client = Client(seq)
    for n in range(11, 31):
        seq.hold(n, text(n))
    assert len(seq.held) == 3
    client.replay(0, 10)
    actions = seq.drain()
    assert actions == [
        Send(text(11), 11),
        Send(text(12), 12),
        Send(text(13), 13),
        Refill(13, 30),
    ]
    client.run(actions)
    assert client.got == list(range(1, 31))
    assert seq.drain() == []


def test_tail_refill_when_the_last_publication_is_lost():
    """The last held event's publication lost but its seq seen (overflow): the
    drain refills through the highest seq seen."""
    seq = Sequencer(buffer_limit=0)
    client = Client(seq)
    seq.hold(7, text(7))
    client.replay(0, 5)
    assert seq.drain() == [Refill(5, 7)]


def test_held_events_at_or_below_the_replay_are_dropped():
    """An event published before the replay read its range is in the replay;
    its live copy is dropped."""
    seq = Sequencer(buffer_limit=10)
    client = Client(seq)
    for n in (3, 4, 5):
        seq.hold(n, text(n))
    client.replay(2, 5)
    assert seq.drain() == []
    assert client.got == [3, 4, 5]


def test_random_interleavings_never_gap_or_repeat():
    """Random publication orders, losses and buffer sizes: the client always
    receives after+1..top exactly once, in order."""
    rng = random.Random(7)
    for _ in range(500):
        after = rng.randrange(0, 5)
        head = after + rng.randrange(0, 6)
        top = head + rng.randrange(0, 8)
        published = [n for n in range(after + 1, top + 1) if rng.random() > 0.2]
        rng.shuffle(published)
        split = rng.randrange(0, len(published) + 1)
        seq = Sequencer(buffer_limit=rng.randrange(0, 4))
        seq.attach(after)
        client = Client(seq)
        for n in published[:split]:
            seq.hold(n, text(n))
        client.replay(after, head)
        client.drain()
        for n in sorted(published[split:]):
            client.run(seq.live([(n, text(n))]))
        expected_top = max([head, *published]) if published else head
        assert client.got == list(range(after + 1, expected_top + 1))


def test_phase_transitions_are_declared():
    """Every declared move is allowed, a repeat is a no-op, anything else raises."""
    for current, new in itertools.product(Phase, Phase):
        if new is current:
            assert d.check_transition(current, new) is False
        elif new in d.TRANSITIONS[current]:
            assert d.check_transition(current, new) is True
        else:
            with pytest.raises(PhaseError):
                d.check_transition(current, new)
    # Every phase can close; nothing leaves CLOSING.
    assert all(Phase.CLOSING in d.TRANSITIONS[p] for p in Phase if p is not Phase.CLOSING)
    assert d.TRANSITIONS[Phase.CLOSING] == frozenset()


def test_batcher_cuts_at_frames_and_characters():
    """Batches hold at most max_frames frames or max_chars characters; the
    texts inside are the frames unchanged."""
    batcher = Batcher(max_frames=3, max_chars=1000)
    out = [batcher.add(text(n)) for n in range(1, 8)]
    full = [json.loads(b) for b in out if b is not None]
    assert [[f["seq"] for f in b["frames"]] for b in full] == [[1, 2, 3], [4, 5, 6]]
    rest = json.loads(batcher.flush())
    assert rest == {"type": "batch", "frames": [{"seq": 7}]}
    assert batcher.flush() is None
    small = Batcher(max_frames=100, max_chars=15)
    assert small.add(text(1)) is None
    assert json.loads(small.add(text(2)))["frames"] == [{"seq": 1}, {"seq": 2}]


def test_contiguous_raises_at_a_purged_hole():
    """A page that skips a seq (purged under the replay) is never sent past."""
    assert list(d.contiguous(2, [("a", 3), ("b", 4)])) == [Send("a", 3), Send("b", 4)]
    sent = []
    with pytest.raises(LogHole) as hole:
        for step in d.contiguous(2, [("a", 3), ("c", 5)]):
            sent.append(step.seq)
    assert sent == [3]
    assert hole.value.cursor == 3


def test_interleave_compacts_exact_stretches_and_refills_the_rest():
    """Between skeleton frames: a stretch exactly superseded becomes one
    Compacted, any other gap is read as a range."""
    page = [("u", 1), ("r", 2), ("m", 9), ("x", 12), ("y", 20)]
    superseded = {3: (8, "run_a"), 13: (15, "run_b")}
    assert list(d.interleave(0, page, superseded)) == [
        Send("u", 1),
        Send("r", 2),
        Compacted(3, 8, "run_a"),
        Send("m", 9),
        Refill(9, 11),
        Send("x", 12),
        Refill(12, 19),  # 13..15 superseded but 16..19 kept: read whole
        Send("y", 20),
    ]
    frame = json.loads(Compacted(3, 8, "run_a").text("s1"))
    assert frame == {"type": "compacted", "session_id": "s1", "from": 3, "to": 8, "run_id": "run_a"}


def test_the_core_imports_no_asyncio_django_or_channels():
    """The delivery core stays pure: its imports (and the wire's it uses) are
    the standard library's, minus asyncio, and the app's own wire package."""
    root = Path(__file__).resolve().parents[2] / "sessions_app"
    allowed = {
        "__future__",
        "enum",
        "collections",
        "dataclasses",
        "json",
        "datetime",
        "re",
        "typing",
    }
    for path in (
        root / "delivery" / "core.py",
        root / "wire" / "frames.py",
        root / "wire" / "protocol.py",
    ):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in allowed or name.startswith("sessions_app.wire"), (path.name, name)
