"""The channel layer's Redis: several hosts (``REDIS_URL`` with commas) shard
sessions' groups and processes' channels, and losing one costs only the
sessions on it a wait, never an event, a duplicate or a final close; a killed
process's group memberships expire on a bound it cannot stretch."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
import subprocess

import pytest
import redis
from django.conf import settings

from sessions_app.fanout.layers import BatchReceiveRedisChannelLayer
from sessions_app.wire import protocol as p
from tests.harness import WsClient
from tests.support.sessions import send_text
from tests.support.waiting import wait_for, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# What a tab does after these closes: back off and resume.
RETRYABLE = {p.CLOSE_INTERNAL_ERROR, p.CLOSE_TRY_AGAIN, p.CLOSE_SERVICE_RESTART, 1006}


class OwnRedis:
    """A Redis server of this test's own, on a free port: killed and started again."""

    def __init__(self, tmp_path):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.dir = tmp_path
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        self.proc = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL,
        )
        wait_for(lambda: self.client().ping())
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def two_redis(tmp_path_factory):
    """Two Redis servers of this test's own (either may be killed)."""
    if shutil.which("redis-server") is None:
        pytest.skip("REDIS-SERVER NOT INSTALLED: two Redis hosts cannot be started")
    servers = [OwnRedis(tmp_path_factory.mktemp(f"redis{n}")) for n in (0, 1)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.kill()


class Tab:
    """One tab following one session as the browser does: resume after what it
    has rendered, and again after every close, with a pause between tries."""

    def __init__(self, server, cookie: str, session_id: str, changed: asyncio.Event):
        self.server, self.cookie, self.session_id = server, cookie, session_id
        self.changed = changed  # set at every event received
        self.seqs: list[int] = []
        self.closes: list[int] = []
        self.connections: set[str] = set()  # the server's ids of its sockets
        self.client: WsClient | None = None
        self.task = asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        while True:
            try:
                self.client = await WsClient.connect(self.server.ws, self.cookie)
                reply = await self.client.resume(self.session_id, after=self.last)
                assert reply["type"] == "resume_ok", reply
                self.connections.add(reply["connection_id"])
                while True:
                    frame = await self.client.wait(
                        lambda f: f.get("type") == "event" and f["seq"] > self.last, 3600
                    )
                    assert frame["seq"] == self.last + 1, (self.seqs[-3:], frame["seq"])
                    self.seqs.append(frame["seq"])
                    self.changed.set()
            except ConnectionError:
                self.closes.append(self.client.closed_code)
                await asyncio.sleep(0.2)  # sleep-ok: a tab's backoff between resumes

    @property
    def last(self) -> int:
        return self.seqs[-1] if self.seqs else 0

    async def send(self, text: str, cmid: str) -> None:
        """Send until the server has it (the same id again after a close: the
        server keeps one message per id)."""
        while True:
            try:
                await send_text(self.client, text, cmid)
                return
            except (ConnectionError, AttributeError, AssertionError):
                await asyncio.sleep(0.2)  # sleep-ok: a tab's backoff between sends

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        if self.client is not None:
            await self.client.close()


def _groups_on(server: OwnRedis, prefix: str) -> set[str]:
    """The sessions whose group key is on ``server``."""
    marker = f"{prefix}:group:session."
    return {key.decode().split(marker, 1)[1] for key in server.client().scan_iter(f"{marker}*")}


async def _until(changed: asyncio.Event, predicate, timeout: float = 30) -> None:
    """Wait for ``predicate()``, checked whenever a tab receives (``changed``)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            changed.clear()
            await changed.wait()


async def test_two_redis_hosts_shard_sessions_and_losing_one_loses_nothing(
    own_server, cookie, two_redis
):
    """With two Redis hosts, sessions' groups live on both and every tab gets
    every event live. Kill -9 the host that does not hold the server's own
    channel: the sessions on the other host go on live; those on the lost host
    lose live delivery only (their runs go on), and their tabs catch up from
    the log by their tail checks, every seq once and in order, and again once
    it is back empty (the first refill joins the groups again). No tab ever
    sees a final close."""
    urls = [r.url for r in two_redis]
    start, _ = own_server
    # Tail checks every second: the catch-up of a session whose host is lost.
    server = start(REDIS_URL=",".join(urls), AGENT_TAIL_PROBE_SECONDS="1")
    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    openers: list[WsClient] = []  # a socket per new session, in its group meanwhile
    sessions: list[str] = []
    while len(sessions) < 24 and not all(_groups_on(r, prefix) for r in two_redis):
        openers.append(await WsClient.connect(server.ws, cookie))
        sessions.append((await openers[-1].start(tab_id=f"t{len(sessions)}"))["session_id"])
    on = [_groups_on(r, prefix) & set(sessions) for r in two_redis]
    assert on[0] and on[1], "sessions' groups are on both hosts"
    # The server's own channel key (where its sockets' messages go) is on one host.
    group = f"{prefix}:group:session.{sessions[0]}"
    [channel] = {m.decode() for r in two_redis for m in r.client().zrange(group, 0, -1)}
    for opener in openers:
        await opener.close()
    layer = BatchReceiveRedisChannelLayer(hosts=urls)  # for its consistent hash
    lost = 1 - layer.consistent_hash(layer.non_local_name(channel))

    changed = asyncio.Event()
    tabs = [Tab(server, cookie, sid, changed) for sid in sessions]
    await _until(changed, lambda: all(t.last == 1 for t in tabs))
    for n, tab in enumerate(tabs):
        await tab.send("/stream 3 0", f"a{n}")
    # user.message, run.started, three deltas, the message, run.finished.
    await _until(changed, lambda: all(t.last == 8 for t in tabs))

    two_redis[lost].kill()
    mark = len(server.log_text())
    for n, tab in enumerate(tabs):
        await tab.send("/stream 3 0", f"b{n}")
    # Their runs went on, and every tab has them: the other host's sessions'
    # live (a tail check may at most catch one in flight), the lost host's
    # from the log, the whole round, by their tail checks.
    await _until(changed, lambda: all(t.last == 15 for t in tabs))
    refilled = _refilled(server.log_text()[mark:])
    for tab in tabs:
        got = sum(refilled.get(c, 0) for c in tab.connections)
        if tab.session_id in on[lost]:
            assert got == 7, f"the lost host's session {tab.session_id} read the log"
        else:
            assert got <= 2, f"the other host's session {tab.session_id} went on live"

    two_redis[lost].start()  # back, with nothing in it
    for n, tab in enumerate(tabs):
        await tab.send("/stream 3 0", f"c{n}")
    await _until(changed, lambda: all(t.last == 22 for t in tabs))
    # The first refill after it came back joined those sockets' groups again.
    await wait_until(lambda: on[lost] <= _groups_on(two_redis[lost], prefix))
    mark = len(server.log_text())
    for n, tab in enumerate(tabs):
        await tab.send("/stream 3 0", f"d{n}")
    await _until(changed, lambda: all(t.last == 29 for t in tabs))
    refilled = _refilled(server.log_text()[mark:])
    for tab in tabs:  # live again, everywhere
        assert sum(refilled.get(c, 0) for c in tab.connections) <= 2, tab.session_id
    for tab in tabs:
        await tab.stop()
        assert tab.seqs == list(range(1, 30)), tab.session_id
        assert set(tab.closes) <= RETRYABLE, tab.closes


def _refilled(log: str) -> dict[str, int]:
    """Events each connection was sent from the log by a tail check, per the server's log."""
    got: dict[str, int] = {}
    for connection, first, last in re.findall(r"connection (\S+): refilling (\d+)\.\.(\d+)", log):
        got[connection] = got.get(connection, 0) + int(last) - int(first) + 1
    return got


async def test_a_killed_servers_group_memberships_expire_on_their_bound(
    own_server, cookie, two_redis
):
    """Kill -9 a server with a socket in a session's group: the membership it
    can no longer renew is gone from Redis within ``CHANNEL_GROUP_EXPIRY``
    (2 s here; 300 by default with Redis), not a day later."""
    start, _ = own_server
    server = start(REDIS_URL=two_redis[0].url, CHANNEL_GROUP_EXPIRY="2")
    tab = await WsClient.connect(server.ws, cookie)
    session_id = (await tab.start())["session_id"]
    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    key = f"{prefix}:group:session.{session_id}"
    redis_client = two_redis[0].client()
    assert 0 < redis_client.ttl(key) <= 2
    server.kill()
    await wait_until(lambda: not redis_client.exists(key), timeout=5)


async def test_a_lost_redis_host_locks_nobody_out(own_server, cookie, tmp_path):
    """The Redis host of the server's channel is killed under a user's two
    tabs, the most this user may have (AGENT_USER_MAX_SOCKETS=2): each is
    closed with a retryable code, and the server logs the outage in a line
    or two, not a traceback a socket. Once the host is back, the user's two
    new tabs are let in, not refused 4429: the lost receives gave their slots
    back (the drill's daphne refused every tab until it was restarted)."""
    if shutil.which("redis-server") is None:
        pytest.skip("REDIS-SERVER NOT INSTALLED: a Redis host of the test's own cannot be started")
    own = OwnRedis(tmp_path).start()
    try:
        start, _ = own_server
        server = start(REDIS_URL=own.url, AGENT_USER_MAX_SOCKETS="2")
        tabs = [await WsClient.connect(server.ws, cookie) for _ in range(2)]
        session_id = (await tabs[0].start())["session_id"]
        assert (await tabs[1].resume(session_id, 0))["type"] == "resume_ok"
        mark = len(server.log_text())
        own.kill()
        for tab in tabs:
            assert await tab.wait_closed(30) in RETRYABLE
        own.start()
        for _ in range(2):  # twice: the first pair's slots are given back too
            again = [await WsClient.connect(server.ws, cookie) for _ in range(2)]
            for tab in again:
                assert (await tab.resume(session_id, 0))["type"] == "resume_ok"
            for tab in again:
                await tab.close()
        logged = server.log_text()[mark:]
        assert "Exception inside application" not in logged
        assert logged.count("channel layer receive failed") <= 2, logged
    finally:
        own.kill()


async def test_readyz_with_two_hosts_answers_truly_every_time(own_server, two_redis):
    """/readyz with two Redis hosts: 20 of 20 probes ready while both are up
    (its probe used to be sent where nobody read it, half the time), each
    host named up; with one killed, every probe names that host down."""
    import httpx

    start, _ = own_server
    server = start(REDIS_URL=",".join(r.url for r in two_redis), AGENT_METRICS_TOKEN="t")

    def probes() -> list[tuple[int, str]]:
        token = {"Authorization": "Bearer t"}  # the hosts are shown to the scraper only
        with httpx.Client(base_url=server.http, timeout=10, headers=token) as c:
            return [(r.status_code, r.text) for r in (c.get("/readyz") for _ in range(20))]

    up = await asyncio.to_thread(probes)
    hosts = [f"channel layer host {i} (127.0.0.1:{r.port})" for i, r in enumerate(two_redis)]
    assert up == [(200, "\n".join(["ready", *(f"{h}: up" for h in hosts)]))] * 20
    two_redis[1].kill()
    down = await asyncio.to_thread(probes)
    assert all(text.endswith(f"{hosts[1]}: down") for _, text in down), down[:2]
    assert all(f"{hosts[0]}: up" in text for _, text in down)
    anonymous = await asyncio.to_thread(httpx.get, f"{server.http}/readyz", timeout=10)
    assert "channel layer host" not in anonymous.text  # nobody else is shown the topology
