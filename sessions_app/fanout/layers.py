"""The channel layers: Redis receiving in batches, and a lean in-memory one.

**Redis** (production). channels_redis delivers every message of a server
process through one Redis key, one message per pass and four sequential round
trips each (restore a backup queue, BZPOPMIN, back the message up, clean the
backup). With hundreds of sockets on a server that serial loop, not the CPU,
caps live delivery at a few hundred messages a second, and a streaming
classroom falls seconds behind.

``BatchReceiveRedisChannelLayer`` receives a process's messages with one
task per process (the pump): one BZPOPMIN plus one ZPOPMIN of up to
``RECEIVE_BATCH`` more, each message put in the inbox (a bounded queue)
of every channel it names. A socket's receive is one ``await`` on its inbox,
where the parent's costs two tasks, a lock and a wait per message for every
socket; with 400 sockets that bookkeeping, not Redis, filled the server's
loop. The backup queue is dropped: no socket's cancellation can interrupt the
pump, and only the process dying loses a popped batch (its sockets go with
it). Readers refill anything lost from the log (``delivery.core.Sequencer``).

``group_send_many`` sends many group messages in two round trips in all
(members of every group; then one script that trims, checks capacity and adds
every message), where ``group_send`` takes four per message. A run worker
publishing fifty streams spent 40 % of its CPU in ``group_send``.
Single sends, single group sends and everything else are the parent's.

**Several hosts.** As channels_redis shards them, each group and each
process's channel key lives on one host, chosen by consistent hash. A host
that fails costs the groups and processes on it, not the others: a batch for
several hosts sends to every host it can before raising, and a process whose
key is on the lost host fails its receives (its sockets close with a
retryable code and resume once the host is back).

**In memory** (embedded). Channels' ``InMemoryChannelLayer`` walks every
channel and every group membership of the process on each ``receive`` and
each ``group_send`` (its expiry sweep), so every socket costs every other
socket something: opening 5,000 idle sockets took 217 s, 200 took 1.6 s.
``LocalChannelLayer`` sweeps at most once a second (expiry is counted in
minutes and days; nothing needs it sooner), and a group send puts the message
in each member's queue directly (no task per member) with a plain structural
copy instead of ``deepcopy``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer
from channels_redis.core import BoundedQueue, RedisChannelLayer

from sessions_app.server.logs import Outage

log = logging.getLogger(__name__)
# A lost host fails every pump at once: one line for many.
_outage = Outage(log)

RECEIVE_BATCH = 256
# How often the pump drops the inboxes of channels nobody reads any more, and
# how long unread makes an inbox abandoned (far longer than any handler runs).
SWEEP_SECONDS = 30.0
INBOX_IDLE_SECONDS = 600.0

# KEYS: one channel key per message (repeats allowed). ARGV: per message its
# bytes, its channel's capacity and its score; then the keys' expiry and the
# score before which a key's messages have expired. Scores rise through a
# call, so one key's messages are popped in the order given.
_SEND_MANY = """
local n = #KEYS
local expiry = ARGV[3 * n + 1]
local stale = ARGV[3 * n + 2]
local trimmed = {}
local over = 0
for i = 1, n do
    local key = KEYS[i]
    if not trimmed[key] then
        redis.call('ZREMRANGEBYSCORE', key, 0, stale)
        trimmed[key] = true
    end
    if redis.call('ZCARD', key) < tonumber(ARGV[3 * i - 1]) then
        redis.call('ZADD', key, ARGV[3 * i], ARGV[3 * i - 2])
        redis.call('EXPIRE', key, expiry)
    else
        over = over + 1
    end
end
return over
"""


class BatchReceiveRedisChannelLayer(RedisChannelLayer):
    """channels_redis's layer with batched receives for process-local channels."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # This process's channels: their messages, who is waiting, when each
        # was last read; and the pump of each process-wide Redis key.
        self._inboxes: dict[str, BoundedQueue] = {}
        self._waiting: dict[str, int] = {}
        self._read_at: dict[str, float] = {}
        self._pumps: dict[str, asyncio.Task] = {}
        # The last score given to a message by group_send_many: scores only rise,
        # so a channel's messages from successive calls stay in order.
        self._last_score = 0.0

    async def group_send_many(self, items: list[tuple[str, dict]]) -> None:
        """``group_send`` of each ``(group, message)``, in order: two round trips
        per Redis host for all of them. Messages for one channel keep their
        order; a channel over capacity loses the message, as with ``group_send``
        (consumers refill holes from the log)."""
        by_host: dict[int, list[tuple[str, dict]]] = collections.defaultdict(list)
        for group, message in items:
            by_host[self.consistent_hash(group)].append((group, message))
        # With several hosts, all at once: one that fails (or hangs until its
        # timeout) loses only its own groups' messages (their readers refill
        # from the log); the others are sent meanwhile.
        if len(by_host) == 1:  # one host: no task to spare
            [(index, entries)] = by_host.items()
            await self._send_many_on(index, entries)
            return
        sends = [self._send_many_on(index, entries) for index, entries in by_host.items()]
        _raise_first(await asyncio.gather(*sends, return_exceptions=True), "group messages")

    async def _send_many_on(self, index: int, entries: list[tuple[str, dict]]) -> None:
        connection = self.connection(index)
        groups = list(dict.fromkeys(group for group, _ in entries))
        pipe = connection.pipeline(transaction=False)
        joined_before = int(time.time()) - self.group_expiry
        for group in groups:
            self.require_valid_group_name(group)  # raises if not
            key = self._group_key(group)
            pipe.zremrangebyscore(key, min=0, max=joined_before)
            pipe.zrange(key, 0, -1)
        replies = await pipe.execute()
        members = {
            group: [raw.decode("utf8") for raw in replies[2 * i + 1]]
            for i, group in enumerate(groups)
        }
        # Per host of the channels' keys: the keys and the script's arguments.
        calls: dict[int, tuple[list, list]] = collections.defaultdict(lambda: ([], []))
        score = max(time.time(), self._last_score)
        for group, message in entries:
            # One copy per channel key, naming its channels (as group_send does:
            # a process's sockets share one key).
            targets: dict[str, list[str]] = {}
            for channel in members[group]:
                local = self.non_local_name(channel) if "!" in channel else channel
                targets.setdefault(local, []).append(channel)
            for local, channels in targets.items():
                keys, args = calls[self.consistent_hash(local)]
                score += 1e-6
                keys.append(self.prefix + local)
                args += [
                    self.serialize({**message, "__asgi_channel__": channels}),
                    self.get_capacity(channels[0]),
                    repr(score),
                ]
        self._last_score = score
        evals = []
        for host, (keys, args) in calls.items():
            args += [self.expiry, int(time.time()) - int(self.expiry)]
            evals.append(self.connection(host).eval(_SEND_MANY, len(keys), *keys, *args))
        if len(evals) == 1:  # one host: no task to spare
            results = [await evals[0]]
        else:
            results = await asyncio.gather(*evals, return_exceptions=True)
        for over, (keys, _) in zip(results, calls.values(), strict=True):
            if isinstance(over, int) and over:
                log.info("%s of %s group messages over capacity", over, len(keys))
        _raise_first(results, "messages for processes")

    async def send(self, channel, message):
        """The parent's, but a message for a process's own channel goes to the
        host of that process's key, where its pump reads: the parent picks
        the host by the channel's full name, so with several hosts half of
        such messages (``/readyz``'s probe among them) went where nobody
        reads."""
        if "!" not in channel:
            return await super().send(channel, message)
        if not isinstance(message, dict) or "__asgi_channel__" in message:
            raise TypeError("a message is a dict without __asgi_channel__")
        self.require_valid_channel_name(channel)
        local = self.non_local_name(channel)
        score = self._last_score = max(time.time(), self._last_score) + 1e-6
        args = [
            self.serialize({**message, "__asgi_channel__": [channel]}),
            self.get_capacity(channel),
            repr(score),
            self.expiry,
            int(time.time()) - int(self.expiry),
        ]
        connection = self.connection(self.consistent_hash(local))
        if await connection.eval(_SEND_MANY, 1, self.prefix + local, *args):
            raise ChannelFull(channel)

    async def receive(self, channel):
        """The next message for ``channel``. A process's own channels are fed
        from its inboxes (one await per message); others are the parent's."""
        if "!" not in channel:
            return await super().receive(channel)
        inbox = self._inboxes.get(channel) or self._new_inbox(channel)
        if inbox.empty():
            self._ensure_pump(channel)
            self._waiting[channel] = self._waiting.get(channel, 0) + 1
            try:
                item = await inbox.get()
            except asyncio.CancelledError:
                # The socket closed. A message for it that arrives later waits in
                # a fresh inbox until the sweep drops it.
                alone = self._waiting.get(channel) == 1
                if alone and inbox.empty() and self._inboxes.get(channel) is inbox:
                    del self._inboxes[channel]
                raise
            finally:
                self._waiting[channel] -= 1
                if not self._waiting[channel]:
                    del self._waiting[channel]
        else:
            item = inbox.get_nowait()
        self._read_at[channel] = time.monotonic()
        if isinstance(item, _Failed):
            raise item.error
        return item

    def _new_inbox(self, channel: str) -> BoundedQueue:
        # Bounded like the parent's buffers: past ``capacity`` the oldest
        # message goes (the consumer refills the hole from the log).
        inbox = self._inboxes[channel] = BoundedQueue(self.get_capacity(channel))
        self._read_at[channel] = time.monotonic()
        return inbox

    def _ensure_pump(self, channel: str) -> None:
        real = self.non_local_name(channel)
        pump = self._pumps.get(real)
        if pump is None or pump.done() or pump.get_loop() is not asyncio.get_running_loop():
            self._pumps[real] = asyncio.ensure_future(self._pump(real))

    async def _pump(self, real: str) -> None:
        """Move this process's messages from Redis into its channels' inboxes,
        in batches, while anyone receives."""
        connection = self.connection(self.consistent_hash(real))
        key = self.prefix + real
        swept = time.monotonic()
        try:
            while True:
                result = await connection.bzpopmin(key, timeout=self.brpop_timeout)
                now = time.monotonic()
                if now - swept > SWEEP_SECONDS:
                    self.sweep(now)
                    swept = now
                if result is None:
                    if not self._waiting:
                        return  # nobody receives: the next receive starts a pump
                    continue
                more = await connection.zpopmin(key, RECEIVE_BATCH - 1)
                for raw in [result[1], *(member for member, _ in more)]:
                    try:
                        message = self.deserialize(raw)
                    except Exception:
                        log.exception("dropping a message that cannot be read")
                        continue
                    targets = message.pop("__asgi_channel__", None) or []
                    for target in [targets] if isinstance(targets, str) else targets:
                        inbox = self._inboxes.get(target) or self._new_inbox(target)
                        inbox.put_nowait(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Redis failed: every receive waiting now fails (its consumer closes
            # with a retryable code and its client resumes, joining its groups
            # again); the next receive starts a new pump.
            _outage.error("receiving from Redis", exc, time.monotonic())
            for channel in list(self._waiting):
                inbox = self._inboxes.get(channel)
                if inbox is not None:
                    inbox.put_nowait(_Failed(exc))

    def inbox_size(self, channel: str) -> int | None:
        """Messages waiting in ``channel``'s inbox here (None: it has none)."""
        inbox = self._inboxes.get(channel)
        return None if inbox is None else inbox.qsize()

    def is_waiting(self, channel: str) -> bool:
        """Is a receive of ``channel`` waiting here?"""
        return channel in self._waiting

    def sweep(self, now: float) -> None:
        """Drop the inboxes of channels nobody has read for ``INBOX_IDLE_SECONDS``
        (sockets that closed while messages for them were on their way)."""
        for channel, read_at in list(self._read_at.items()):
            if now - read_at > INBOX_IDLE_SECONDS and channel not in self._waiting:
                self._inboxes.pop(channel, None)
                del self._read_at[channel]


def _raise_first(results: list, what: str) -> None:
    """Log each host's failure among ``results`` (of ``gather``), then raise the first."""
    failures = [r for r in results if isinstance(r, BaseException)]
    for failure in failures:
        log.warning("%s for a Redis host failed: %r", what, failure)
    if failures:
        raise failures[0]


class _Failed:
    """An inbox entry: receiving failed with ``error``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


# --- in memory -----------------------------------------------------------------------

# How often the in-memory layer sweeps expired messages and group memberships.
LOCAL_SWEEP_SECONDS = 1.0


def _copy(value):
    """A copy of a message that shares nothing mutable with it (messages are
    JSON-like: dicts, lists, strings and numbers), cheaper than ``deepcopy``."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


class LocalChannelLayer(InMemoryChannelLayer):
    """Channels' in-memory layer without work proportional to the process's
    sockets on every operation (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._swept_at = float("-inf")

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < LOCAL_SWEEP_SECONDS:
            return
        self._swept_at = now
        super()._clean_expired()

    async def send(self, channel, message):
        if not isinstance(message, dict) or "__asgi_channel__" in message:
            raise TypeError("a message is a dict without __asgi_channel__")
        self.require_valid_channel_name(channel)
        self._put(channel, message)

    def _put(self, channel: str, message: dict) -> None:
        queue = self.channels.get(channel)
        if queue is None:
            queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
        try:
            queue.put_nowait((time.time() + self.expiry, _copy(message)))
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None

    async def group_send(self, group, message):
        if not isinstance(message, dict):
            raise TypeError("a message is a dict")
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, ())):
            # As the parent: a full member misses the message (consumers refill).
            with contextlib.suppress(ChannelFull):
                self._put(channel, message)
