"""The batched Redis channel layer (``sessions_app.fanout.layers``) against a real Redis."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest
import redis

from sessions_app.fanout import layers
from sessions_app.fanout.layers import BatchReceiveRedisChannelLayer

REDIS = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/5")


def _redis_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _redis_up(), reason="REDIS NOT REACHABLE at 127.0.0.1:6379: the layer is not under test"
)


@pytest.fixture
async def layer():
    layer = BatchReceiveRedisChannelLayer(hosts=[REDIS], prefix=f"test-layers-{os.getpid()}-")
    yield layer
    await layer.flush()


async def test_messages_reach_each_local_channel_in_order(layer):
    """Messages for several sockets of one process, sent in a burst, are received
    once each and in order per channel."""
    a, b = await layer.new_channel(), await layer.new_channel()
    for i in range(5):
        await layer.send(a, {"type": "m", "n": i})
        await layer.send(b, {"type": "m", "n": 10 + i})
    got_a = [(await layer.receive(a))["n"] for _ in range(5)]
    got_b = [(await layer.receive(b))["n"] for _ in range(5)]
    assert got_a == [0, 1, 2, 3, 4]
    assert got_b == [10, 11, 12, 13, 14]


async def test_a_receive_cancelled_mid_pop_loses_no_message(layer, monkeypatch):
    """The socket whose receive is popping for the whole process closes (its receive
    is cancelled) between Redis handing over a message and the batch being read:
    the message still reaches the next receive."""
    channel = await layer.new_channel()
    await layer.send(channel, {"type": "m", "n": 1})
    real_connection = layer.connection
    entered, release = asyncio.Event(), asyncio.Event()

    class SlowBatch:
        def __init__(self, conn):
            self._conn = conn

        def __getattr__(self, name):
            return getattr(self._conn, name)

        async def zpopmin(self, *args):
            entered.set()
            await release.wait()
            return await self._conn.zpopmin(*args)

    monkeypatch.setattr(layer, "connection", lambda index: SlowBatch(real_connection(index)))
    receiving = asyncio.ensure_future(layer.receive(channel))
    await entered.wait()  # BZPOPMIN has taken the message out of Redis
    receiving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await receiving
    release.set()
    message = await asyncio.wait_for(layer.receive(channel), 10)
    assert message["n"] == 1


async def test_group_send_many_reaches_each_member_once_in_order(layer):
    """One batched call for several groups: every member of each group gets each
    of its group's messages once, in the order given, and nobody else does."""
    a, b, c = [await layer.new_channel() for _ in range(3)]
    await layer.group_add("g1", a)
    await layer.group_add("g1", b)
    await layer.group_add("g2", c)
    await layer.group_add("g2", a)
    items = []
    for i in range(30):
        items.append(("g1", {"type": "m", "n": i}))
        items.append(("g2", {"type": "m", "n": 100 + i}))
    await layer.group_send_many(items)
    got = {ch: [] for ch in (a, b, c)}
    for ch, count in ((a, 60), (b, 30), (c, 30)):
        for _ in range(count):
            got[ch].append((await asyncio.wait_for(layer.receive(ch), 10))["n"])
    assert got[b] == list(range(30))
    assert got[c] == list(range(100, 130))
    assert got[a] == [n for i in range(30) for n in (i, 100 + i)]
    for ch in (a, b, c):  # nothing more for anyone
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(ch), 0.3)


def _closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there
    return port


async def test_a_lost_host_costs_group_send_many_only_its_own_groups():
    """With two hosts, one of them down: a batch for groups on both still
    delivers every message of the live host's groups (whichever host comes
    first), then raises for the lost one."""
    hosts = [f"redis://127.0.0.1:{_closed_port()}/0", REDIS]
    for _ in range(64):  # a layer whose own channels live on the live host
        layer = BatchReceiveRedisChannelLayer(hosts=hosts, prefix=f"test-hosts-{os.getpid()}-")
        channel = await layer.new_channel()
        if layer.consistent_hash(layer.non_local_name(channel)) == 1:
            break
    names = (f"g{n}" for n in range(1000))
    dead = next(g for g in names if layer.consistent_hash(g) == 0)
    live = next(g for g in names if layer.consistent_hash(g) == 1)
    await layer.group_add(live, channel)
    try:
        for first, second in ((dead, live), (live, dead)):
            with pytest.raises(redis.exceptions.ConnectionError):
                await layer.group_send_many([(first, {"type": "m"}), (second, {"type": "m"})])
            assert (await asyncio.wait_for(layer.receive(channel), 10))["type"] == "m"
    finally:
        await layer.group_discard(live, channel)


async def test_with_two_hosts_a_send_to_a_processs_channel_reaches_it():
    """Two hosts (two databases of one server here): a message sent to each
    of 40 of this process's channels reaches it, wherever the channel's full
    name hashes (the parent's send put about half on the other host, where
    nobody reads: /readyz failed every other probe), and over capacity a
    send raises ChannelFull."""
    hosts = [REDIS, REDIS.rsplit("/", 1)[0] + "/7"]
    layer = BatchReceiveRedisChannelLayer(hosts=hosts, prefix=f"test-two-{os.getpid()}-")
    small = BatchReceiveRedisChannelLayer(
        hosts=hosts, prefix=f"test-small-{os.getpid()}-", capacity=2
    )
    try:
        channels = [await layer.new_channel("readyz") for _ in range(40)]
        assert len({layer.consistent_hash(c) for c in channels}) == 2  # both hosts' names
        for n, channel in enumerate(channels):
            await layer.send(channel, {"type": "ping", "n": n})
        for n, channel in enumerate(channels):
            assert await asyncio.wait_for(layer.receive(channel), 5) == {"type": "ping", "n": n}
        full = await small.new_channel()
        await small.send(full, {"type": "a"})
        await small.send(full, {"type": "b"})
        with pytest.raises(layers.ChannelFull):
            await small.send(full, {"type": "c"})
    finally:
        await layer.flush()
        await small.flush()


async def test_successive_batched_sends_keep_a_channels_order(layer):
    """Messages of later calls never overtake earlier ones at a channel (scores
    only rise, even for calls within the same clock tick)."""
    layer.capacity = 1000
    a = await layer.new_channel()
    await layer.group_add("g", a)
    for call in range(20):
        await layer.group_send_many([("g", {"type": "m", "n": call * 10 + i}) for i in range(10)])
    got = [(await asyncio.wait_for(layer.receive(a), 10))["n"] for _ in range(200)]
    assert got == list(range(200))


async def test_group_send_many_respects_capacity(layer):
    """A channel over capacity loses what does not fit (as group_send does);
    the consumers refill such holes from the log."""
    layer.capacity = 5
    a = await layer.new_channel()
    await layer.group_add("g", a)
    await layer.group_send_many([("g", {"type": "m", "n": i}) for i in range(8)])
    got = [(await asyncio.wait_for(layer.receive(a), 10))["n"] for _ in range(5)]
    assert got == [0, 1, 2, 3, 4]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(layer.receive(a), 0.3)


async def test_a_redis_failure_fails_the_waiting_receives(layer, monkeypatch):
    """When Redis fails under the pump, every receive waiting then raises (its
    consumer closes with a retryable code), and the next receive pumps again."""
    a, b = await layer.new_channel(), await layer.new_channel()
    real_connection = layer.connection
    failing = asyncio.Event()

    popping = asyncio.Event()

    class Broken:
        async def bzpopmin(self, *args, **kwargs):
            popping.set()
            await failing.wait()
            raise ConnectionError("Redis went away")

    monkeypatch.setattr(layer, "connection", lambda index: Broken())
    waits = [asyncio.ensure_future(layer.receive(ch)) for ch in (a, b)]
    # The pump starts from a waiting receive, after both were scheduled.
    await popping.wait()
    assert layer.is_waiting(a) and layer.is_waiting(b)
    failing.set()
    for waiting in waits:
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(waiting, 10)
    monkeypatch.setattr(layer, "connection", real_connection)
    await layer.send(a, {"type": "m", "n": 7})
    assert (await asyncio.wait_for(layer.receive(a), 10))["n"] == 7


async def test_inboxes_of_channels_nobody_reads_are_swept(layer):
    """A message for a socket that closed waits in an inbox only until the sweep
    drops it (after INBOX_IDLE_SECONDS unread), so closed sockets leave nothing
    behind."""
    a = await layer.new_channel()
    real_connection = layer.connection
    popping = asyncio.Event()

    class Watched:
        def __init__(self, conn):
            self._conn = conn

        def __getattr__(self, name):
            return getattr(self._conn, name)

        async def bzpopmin(self, *args, **kwargs):
            popping.set()
            return await self._conn.bzpopmin(*args, **kwargs)

    layer.connection = lambda index: Watched(real_connection(index))
    receiving = asyncio.ensure_future(layer.receive(a))
    await popping.wait()  # the pump is started by a receive that waits
    assert layer.is_waiting(a)
    receiving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await receiving
    assert layer.inbox_size(a) is None
    await layer.send(a, {"type": "m", "n": 1})  # arrives after the socket closed
    b = await layer.new_channel()
    await layer.send(b, {"type": "m", "n": 2})
    assert (await asyncio.wait_for(layer.receive(b), 10))["n"] == 2  # the pump ran
    assert layer.inbox_size(a) is not None
    layer.sweep(time.monotonic() + layers.INBOX_IDLE_SECONDS + 1)
    assert layer.inbox_size(a) is None and layer.inbox_size(b) is None


async def test_an_inbox_keeps_at_most_capacity_messages(layer):
    """A socket that stops reading holds at most ``capacity`` messages in its
    server's memory; past that the oldest go (its consumer refills from the log)."""
    layer.capacity = 3
    a, b = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("g", a)
    await layer.group_add("g", b)
    for start in (0, 3):  # b reads each round, so the pump has passed it to a too
        await layer.group_send_many([("g", {"type": "m", "n": start + i}) for i in range(3)])
        got = [(await asyncio.wait_for(layer.receive(b), 10))["n"] for _ in range(3)]
        assert got == [start, start + 1, start + 2]
    assert layer.inbox_size(a) == 3
    assert [(await layer.receive(a))["n"] for _ in range(3)] == [3, 4, 5]
