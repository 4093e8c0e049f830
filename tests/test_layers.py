"""The batched Redis channel layer (``sessions_app.layers``) against a real Redis."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from sessions_app.layers import BatchReceiveRedisChannelLayer

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
    layer = BatchReceiveRedisChannelLayer(hosts=[REDIS], prefix=f"test-layers-{os.getpid()}")
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
