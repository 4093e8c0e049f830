"""The Redis channel layer, receiving a server's messages in batches.

channels_redis delivers every message of a server process through one Redis
key, one message per pass and four sequential round trips each (restore a
backup queue, BZPOPMIN, back the message up, clean the backup). With hundreds
of sockets on a server that serial loop, not the CPU, caps live delivery at a
few hundred messages a second, and a streaming classroom falls seconds behind.

``BatchReceiveRedisChannelLayer`` receives a process's messages with one
BZPOPMIN plus one ZPOPMIN of up to ``RECEIVE_BATCH`` more, and hands them out
in order. It drops the backup queue: that queue keeps a message for a *later
receive of the same process* if the receiving coroutine is cancelled, which
for a server's sockets means the process is going away with them. Consumers
refill anything lost from the log (``consumers``), so at-most-once delivery
here costs no event. Group sends, sends and everything else are the parent's.
"""

from __future__ import annotations

import collections

from channels_redis.core import RedisChannelLayer

RECEIVE_BATCH = 256


class BatchReceiveRedisChannelLayer(RedisChannelLayer):
    """channels_redis's layer with batched receives for process-local channels."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._received: dict[str, collections.deque] = {}

    async def receive_single(self, channel):
        if "!" not in channel:
            return await super().receive_single(channel)
        pending = self._received.get(channel)
        if pending:
            return pending.popleft()
        connection = self.connection(self.consistent_hash(channel))
        key = self.prefix + channel
        result = None
        while result is None:
            result = await connection.bzpopmin(key, timeout=self.brpop_timeout)
        _, first, _ = result
        more = await connection.zpopmin(key, RECEIVE_BATCH - 1)
        batch = collections.deque()
        for raw in [first, *(member for member, _ in more)]:
            message = self.deserialize(raw)
            batch.append((message.pop("__asgi_channel__", channel), message))
        head = batch.popleft()
        if batch:
            self._received[channel] = batch
        return head
