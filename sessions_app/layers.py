"""The Redis channel layer, receiving a server's messages in batches.

channels_redis delivers every message of a server process through one Redis
key, one message per pass and four sequential round trips each (restore a
backup queue, BZPOPMIN, back the message up, clean the backup). With hundreds
of sockets on a server that serial loop, not the CPU, caps live delivery at a
few hundred messages a second, and a streaming classroom falls seconds behind.

``BatchReceiveRedisChannelLayer`` receives a process's messages with one
BZPOPMIN plus one ZPOPMIN of up to ``RECEIVE_BATCH`` more, and hands them out
in order. It drops the backup queue: that queue keeps a message for a *later
receive of the same process* if the receiving coroutine is cancelled. Here the
pop runs in a task of its own that no caller's cancellation stops (one socket
closing cancels the receive it was waiting in, which may be the one popping
for every socket of the process), and whatever it pops lands in the process's
buffer for the next receive. Only the process dying loses a popped batch, and
its sockets go with it; consumers refill anything lost from the log
(``consumers``). Group sends, sends and everything else are the parent's.
"""

from __future__ import annotations

import asyncio
import collections
import logging

from channels_redis.core import RedisChannelLayer

log = logging.getLogger(__name__)

RECEIVE_BATCH = 256


class BatchReceiveRedisChannelLayer(RedisChannelLayer):
    """channels_redis's layer with batched receives for process-local channels."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._received: dict[str, collections.deque] = {}
        self._popping: dict[str, asyncio.Task] = {}

    async def receive_single(self, channel):
        if "!" not in channel:
            return await super().receive_single(channel)
        while True:
            pending = self._received.get(channel)
            if pending:
                return pending.popleft()
            task = self._popping.get(channel)
            if task is None:
                task = asyncio.ensure_future(self._pop_batch(channel))
                task.add_done_callback(_retrieve)
                self._popping[channel] = task
            # A cancelled caller leaves the pop running; its batch waits here.
            await asyncio.shield(task)

    async def _pop_batch(self, channel) -> None:
        try:
            connection = self.connection(self.consistent_hash(channel))
            key = self.prefix + channel
            result = None
            while result is None:
                result = await connection.bzpopmin(key, timeout=self.brpop_timeout)
            _, first, _ = result
            more = await connection.zpopmin(key, RECEIVE_BATCH - 1)
            batch = self._received.setdefault(channel, collections.deque())
            for raw in [first, *(member for member, _ in more)]:
                message = self.deserialize(raw)
                batch.append((message.pop("__asgi_channel__", channel), message))
        finally:
            self._popping.pop(channel, None)


def _retrieve(task: asyncio.Task) -> None:
    """Consume a pop's failure when every caller had gone (the next receive retries)."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("receiving from Redis failed: %r", task.exception())
