"""The chaos suite's ``outages`` phase (production): the suite's Redis is
stopped for ``args.outage_seconds`` (5 s short, 60 s full) under tabs that
follow streaming sessions, then started again, empty.

Invariants:

- no slot leaks: once the tabs are gone, each daphne's ``agent_sockets_open``
  reads 0, and the user can open ``AGENT_USER_MAX_SOCKETS`` tabs again (the
  drill's daphne refused every tab with 4429 after the outage);
- every tab ends with every seq of its session once, in order, from the log
  (what it could not get live meanwhile it reads when it resumes);
- within 5 s of Redis being back, every tab is live again (a resume_ok);
- ``/readyz`` says the channel layer is down during the outage and is ready
  once it is back;
- the outage is logged in a few lines, not a traceback a socket.

The time from Redis back to the last tab live is the phase's figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

import httpx
from chaos_verify import Report, _db, _quiet, head_of
from websockets.exceptions import WebSocketException

from sessions_app.log.sessions import create_session
from tests.harness import WsClient, api_key, session_cookie

TOKEN = "chaos-metrics"
ENV = {"AGENT_METRICS_TOKEN": TOKEN, "AGENT_USER_MAX_SOCKETS": "8"}
TABS = 8  # one user's, at AGENT_USER_MAX_SOCKETS: a leaked slot refuses a tab
RETRYABLE = {1006, 1011, 1012, 1013}


class Tab:
    """A tab following a session: resumes after what it has, again after
    every close, a moment apart; records when it was last let in."""

    def __init__(self, url: str, cookie: str, session_id: str, tls=None) -> None:
        self.url, self.cookie, self.session_id, self.tls = url, cookie, session_id, tls
        self.seqs: list[int] = []
        self.back: list[float] = []  # from each close of a live socket to the next resume_ok
        self.closed_at: float | None = None
        self.arrived: list[float] = []  # when each of seqs came
        self.closes: list[int | str] = []
        self.live_at = 0.0
        self.epoch: str | None = None
        self.task = asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        while True:
            client = None
            try:
                client = await WsClient.connect(self.url, self.cookie, tls=self.tls)
                after = self.seqs[-1] if self.seqs else 0
                reply = await client.resume(self.session_id, after=after, epoch=self.epoch)
                if reply.get("type") == "resume_ok":
                    self.live_at = time.monotonic()
                    self.epoch = reply["epoch"]
                    if self.closed_at is not None:
                        self.back.append(self.live_at - self.closed_at)
                        self.closed_at = None
                while True:
                    frame = await client.wait(
                        lambda f: f.get("type") == "event" and f["seq"] > self.last, 3600
                    )
                    if frame["seq"] != self.last + 1:
                        self.closes.append(f"gap {self.last} -> {frame['seq']}")
                    self.seqs.append(frame["seq"])
                    self.arrived.append(time.monotonic())
            except (ConnectionError, OSError, TimeoutError, WebSocketException) as exc:
                code = client.closed_code if client is not None else None
                if code is None and getattr(exc, "rcvd", None) is not None:
                    code = exc.rcvd.code  # the server's close, met while sending
                if code is None and getattr(exc, "response", None) is not None:
                    code = f"http {exc.response.status_code}"  # the upgrade refused
                self.closes.append(code if code is not None else type(exc).__name__)
            finally:
                if self.live_at and self.closed_at is None:
                    self.closed_at = time.monotonic()
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.close()
            await asyncio.sleep(0.3)  # sleep-ok: a tab's backoff between resumes

    @property
    def last(self) -> int:
        return self.seqs[-1] if self.seqs else 0

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def _until(check, timeout: float, every: float = 0.1) -> None:
    """Until ``await check()`` is true (TimeoutError after ``timeout``): for
    states no frame announces (a count on another server, a row)."""
    for _ in range(int(timeout / every)):
        if await check():
            return
        await asyncio.sleep(every)  # sleep-ok: polling a state no frame announces
    raise TimeoutError(f"not within {timeout} s")


async def _true(value) -> bool:
    return bool(value)


def _setup():
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="chaos-outages")
    sessions = [create_session(user, f"outage {i}").id for i in range(TABS // 2)]
    return session_cookie(user), api_key(user), sessions


async def _scrape(http: httpx.AsyncClient, daphne, name: str) -> float | None:
    r = await http.get(f"{daphne.http}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    found = re.search(rf"^{name} (\S+)$", r.text, re.M)
    return float(found.group(1)) if found else None


async def outages_phase(cluster, redis, args, report: Report) -> None:
    cookie, key, sessions = await _db(_setup)
    urls = cluster.urls()
    tabs = [Tab(urls[n % len(urls)], cookie, sessions[n % len(sessions)]) for n in range(TABS)]
    marks = [len(text) for text in cluster.logs()]
    async with httpx.AsyncClient(timeout=10) as http:
        await _until(lambda: _true(all(t.live_at for t in tabs)), 30)
        headers = {"Authorization": f"Token {key}"}
        for n, sid in enumerate(sessions):  # answers that stream through the outage
            body = {"client_message_id": f"o{n}", "text": "/stream 60 150"}
            await http.post(
                f"{cluster.daphnes[0].http}/api/sessions/{sid}/messages/",
                json=body,
                headers=headers,
            )
        await asyncio.sleep(1)  # sleep-ok: some of the answer live before the outage
        redis.kill()
        down = time.monotonic()
        await asyncio.sleep(min(args.outage_seconds, 2))  # sleep-ok: into the outage
        ready = await http.get(f"{cluster.daphnes[0].http}/readyz")
        report.check(
            ready.status_code == 503 and "channel layer" in ready.text,
            f"outages: /readyz says the channel layer is down ({ready.status_code})",
        )
        await asyncio.sleep(max(args.outage_seconds - 2, 0))  # sleep-ok: the outage lasts
        redis.start()
        back = time.monotonic()
        await _until(lambda: _true(all(t.live_at > back for t in tabs)), 60)
        live_again = max(t.live_at for t in tabs) - back
        ready = await http.get(f"{cluster.daphnes[0].http}/readyz")
        heads: dict[str, int] = {}

        async def caught_up() -> bool:
            # The answers ended (run.finished is the last event) and every tab has it all.
            heads.update({sid: await _db(head_of, sid) for sid in sessions})
            ended = await _db(_quiet, sessions)
            return ended and all(t.last == heads[t.session_id] for t in tabs)

        await _until(caught_up, 90, 0.3)
        for tab in tabs:
            await tab.stop()

        async def none_open() -> bool:
            counts = [await _scrape(http, d, "agent_sockets_open") for d in cluster.daphnes]
            return counts == [0.0] * len(counts)

        await _until(none_open, 15, 0.2)
        again = [await WsClient.connect(urls[0], cookie) for _ in range(TABS)]
        let_in = [(await c.resume(sessions[0], 0)).get("type") for c in again]
        for c in again:
            await c.close()
    report.figure(
        f"outages: Redis stopped {args.outage_seconds:g} s under {TABS} tabs; every tab live "
        f"again {live_again:.2f} s after it was back (outage {back - down:.1f} s)"
    )
    report.check(ready.status_code == 200, "outages: /readyz is ready once Redis is back")
    report.check(live_again < 5, f"outages: every tab live within 5 s ({live_again:.2f} s)")
    bad = [
        (t.session_id, t.seqs[:3], t.seqs[-3:])
        for t in tabs
        if t.seqs != list(range(1, heads[t.session_id] + 1))
    ]
    report.check(not bad, f"outages: every tab has every seq once, in order: {bad[:2]}")
    odd = {c for t in tabs for c in t.closes} - RETRYABLE - {"ConnectionRefusedError"}
    report.check(not odd, f"outages: every close retryable: {sorted(map(str, odd))}")
    report.check(
        let_in == ["resume_ok"] * TABS,
        f"outages: no slot leaked: the user's {TABS} tabs let in again ({let_in})",
    )
    logged = "".join(text[mark:] for text, mark in zip(cluster.logs(), marks, strict=False))
    lines = logged.count("channel layer receive failed")
    # One line a process every 10 s (logs.Outage), and one as it begins and ends.
    bound = max(10, len(cluster.daphnes) * (int(args.outage_seconds // 10) + 2))
    report.check(
        logged.count("Exception inside application") == 0 and lines <= bound,
        f"outages: the outage is a few lines ({lines} of at most {bound}), "
        "no 'Exception inside application'",
    )
