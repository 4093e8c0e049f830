"""The in-memory channel layer of the embedded profile
(``sessions_app.fanout.layers.LocalChannelLayer``):
Channels' semantics, without a sweep of every channel on every operation."""

from __future__ import annotations

import pytest
from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

from sessions_app.fanout import layers
from sessions_app.fanout.layers import LocalChannelLayer


@pytest.fixture
def layer():
    return LocalChannelLayer(expiry=60, capacity=5)


async def test_send_receive_and_group_send_keep_channels_semantics(layer):
    """A message sent to a channel is received there; a group send reaches
    every member once and in order, and nobody after it left the group."""
    a, b, c = [await layer.new_channel() for _ in range(3)]
    await layer.send(a, {"type": "x", "n": 0})
    assert await layer.receive(a) == {"type": "x", "n": 0}
    for channel in (a, b, c):
        await layer.group_add("g", channel)
    await layer.group_discard("g", c)
    for n in range(3):
        await layer.group_send("g", {"type": "x", "n": n})
    for channel in (a, b):
        assert [(await layer.receive(channel))["n"] for _ in range(3)] == [0, 1, 2]
    await layer.send(c, {"type": "only-c"})
    assert await layer.receive(c) == {"type": "only-c"}  # nothing of the group's before it


async def test_each_receiver_gets_its_own_copy(layer):
    """A member that changes its message changes nobody else's (nor the sender's)."""
    a, b = await layer.new_channel(), await layer.new_channel()
    for channel in (a, b):
        await layer.group_add("g", channel)
    message = {"type": "events", "events": [[1, "t"]], "meta": {"k": "v"}}
    await layer.group_send("g", message)
    got_a = await layer.receive(a)
    got_a["events"].append([2, "u"])
    got_a["meta"]["k"] = "changed"
    assert await layer.receive(b) == {"type": "events", "events": [[1, "t"]], "meta": {"k": "v"}}
    assert message == {"type": "events", "events": [[1, "t"]], "meta": {"k": "v"}}


async def test_capacity_a_full_member_misses_a_group_message_a_send_raises(layer):
    """As Channels' layer: over capacity a direct send raises ChannelFull, a
    group send skips the full member and still reaches the others."""
    full, other = await layer.new_channel(), await layer.new_channel()
    for n in range(5):
        await layer.send(full, {"type": "x", "n": n})
    with pytest.raises(ChannelFull):
        await layer.send(full, {"type": "x", "n": 5})
    for channel in (full, other):
        await layer.group_add("g", channel)
    await layer.group_send("g", {"type": "x", "n": "g"})
    assert (await layer.receive(other))["n"] == "g"
    assert [(await layer.receive(full))["n"] for _ in range(5)] == [0, 1, 2, 3, 4]


async def test_expired_messages_and_memberships_still_expire(monkeypatch):
    """Expiry still holds: once a sweep is due, an expired message is dropped
    and its channel leaves its groups, as in Channels' layer."""
    layer = LocalChannelLayer(expiry=-1)  # the first message is sent already expired
    stale, fresh = await layer.new_channel(), await layer.new_channel()
    for channel in (stale, fresh):
        await layer.group_add("g", channel)
    await layer.send(stale, {"type": "old"})
    layer.expiry = 60  # and the next ones are not
    monkeypatch.setattr(layers, "LOCAL_SWEEP_SECONDS", 0)
    await layer.group_send("g", {"type": "new"})
    assert stale not in layer.groups["g"]
    assert await layer.receive(fresh) == {"type": "new"}


async def test_one_sweep_a_second_whatever_the_number_of_channels(monkeypatch):
    """The sweep over every channel and membership runs at most once per
    LOCAL_SWEEP_SECONDS, not on each receive and group send (Channels' own
    layer sweeps on every one of them)."""
    sweeps = []
    original = InMemoryChannelLayer._clean_expired
    monkeypatch.setattr(
        InMemoryChannelLayer, "_clean_expired", lambda self: sweeps.append(1) or original(self)
    )
    layer = LocalChannelLayer()
    channels = [await layer.new_channel() for _ in range(500)]
    for channel in channels:
        await layer.group_add(f"g{channel[-3:]}", channel)
        await layer.send(channel, {"type": "x"})
    for channel in channels:
        await layer.receive(channel)
        await layer.group_send(f"g{channel[-3:]}", {"type": "y"})
    assert len(sweeps) == 1
    plain = InMemoryChannelLayer()
    for channel in channels[:10]:
        await plain.send(channel, {"type": "x"})
        await plain.receive(channel)
    assert len(sweeps) == 11
