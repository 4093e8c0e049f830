"""The HTTP reader (sessions_app/delivery/reader.py) on a fake channel layer
and a fake log, without a server: however its response ends, its groups are
left and its slot given back; a read held by an outage gets keep-alives.

What it delivers, in what order, is the driver's (test_driver.py); here,
what is the reader's own: its task, its groups, its slot, its bytes.
"""

from __future__ import annotations

import asyncio

import pytest

from sessions_app.delivery import reader as r
from sessions_app.delivery.core import Send
from sessions_app.wire import sse


class Layer:
    """Groups as sets; each call takes a turn of the loop, as Redis does."""

    group_expiry = 86400

    def __init__(self) -> None:
        self.members: dict[str, set[str]] = {}
        self.messages: asyncio.Queue[dict] = asyncio.Queue()
        self.added = asyncio.Event()

    async def new_channel(self) -> str:
        return "reader!1"

    async def group_add(self, group: str, channel: str) -> None:
        await asyncio.sleep(0)  # sleep-ok: one turn of the loop, a round trip
        self.members.setdefault(group, set()).add(channel)
        self.added.set()

    async def group_discard(self, group: str, channel: str) -> None:
        await asyncio.sleep(0)  # sleep-ok: one turn of the loop, a round trip
        self.members.get(group, set()).discard(channel)

    async def receive(self, channel: str) -> dict:
        return await self.messages.get()

    def joined(self) -> set[str]:
        return {group for group, members in self.members.items() if members}

    async def all_joined(self) -> None:
        """Until the reader is in its three groups (session, rights, key)."""
        while len(self.joined()) < 3:
            self.added.clear()
            await self.added.wait()


class Slot:
    def __init__(self) -> None:
        self.held, self.released = True, 0

    def started(self) -> None:
        pass

    def release(self) -> None:
        self.held = False
        self.released += 1


class Request:
    scope: dict = {}


class OneRun(sse.NativeEncoder):
    """A dialect whose response is one run: done at its ``stop`` seq."""

    def __init__(self, stop: int) -> None:
        self.stop, self.done = stop, False

    def logged(self, text: str, seq: int) -> bytes:
        self.done = seq >= self.stop
        return super().logged(text, seq)


def text(seq: int) -> str:
    return f'{{"type":"event","kind":"x","seq":{seq}}}'


@pytest.fixture
def log(monkeypatch):
    """The session's log (seqs 1..head) and its head read; ``held`` set: the
    head read waits for it (a read a database outage holds)."""
    state = {"head": 3, "epoch": "E1", "held": None}
    layer = Layer()

    async def head_and_standing(*args):
        if state["held"] is not None:
            await state["held"].wait()
        return (state["head"], state["epoch"], 0), True

    async def frames(session_id, after, upto, plan=None, first_page=None):
        yield [Send(text(seq), seq) for seq in range(after + 1, upto + 1)]

    monkeypatch.setattr(r, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(r, "head_and_standing", head_and_standing)
    monkeypatch.setattr(r.replay, "frames", frames)
    state["layer"] = layer
    return state


def reading(encoder=None) -> tuple[r.StreamReader, Slot]:
    follow = r.Follow("s1", 0, "E1", (1, "hash"), token_id="t1")
    slot = Slot()
    return r.StreamReader(Request(), follow, slot, encoder or sse.NativeEncoder()), slot


async def test_a_reset_by_the_server_leaves_every_group_and_gives_the_slot_back(log):
    """A rotation's message mid-live: the response ends with its reset, and
    the session's, rights' and key's groups are left (a response whose
    groups stay joined costs the layer every later message for a day)."""
    reader, slot = reading()
    out = [chunk async for chunk in _rotated(reader, log)]
    assert b"epoch_mismatch" in out[-1]
    assert log["layer"].joined() == set() and slot.released


async def _rotated(reader, log):
    body = reader.body()
    yield await anext(body)  # the opening
    yield await anext(body)  # the replay
    await log["layer"].all_joined()
    await log["layer"].messages.put({"type": "session.rotated", "session_id": "s1", "epoch": "E2"})
    async for chunk in body:
        yield chunk


async def test_a_dialect_done_at_its_run_leaves_every_group(log):
    """An AI SDK or AG-UI response ends itself at its run's end: its groups
    are left too, and nothing follows what ended it."""
    reader, slot = reading(OneRun(stop=2))
    out = [chunk async for chunk in reader.body()]
    assert out[-1].endswith(b'"seq":2}\n\n') and b"id: 3" not in b"".join(out)
    assert log["layer"].joined() == set() and slot.released


async def test_a_client_gone_mid_stream_stops_the_reader(log):
    """The client leaves while the stream is live: the reader's task is
    stopped, its groups left, its slot given back."""
    reader, slot = reading()
    body = reader.body()
    await anext(body)
    await anext(body)
    await log["layer"].all_joined()
    await body.aclose()
    assert log["layer"].joined() == set() and slot.released


async def test_a_held_head_read_gets_keep_alives_then_the_stream(log, settings):
    """The head read is held (PostgreSQL away behind PgBouncer): keep-alives
    each heartbeat, then the opening and the replay once it answers."""
    settings.AGENT_SSE_HEARTBEAT_SECONDS = 0.02
    log["held"] = asyncio.Event()
    reader, _ = reading()
    body = reader.body()
    assert [await anext(body) for _ in range(2)] == [sse.KEEP_ALIVE] * 2
    log["held"].set()
    assert (await anext(body)).startswith(b"retry: ")  # the opening
    assert b"id: 3\n" in await anext(body)
    await body.aclose()
