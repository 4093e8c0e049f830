"""The chaos suite's ``database`` phase (production): the runbook's database
path, broken three ways under tabs, streams and requests.

The servers reach PostgreSQL as ``docs/deploy.md`` says, through PgBouncer in
transaction mode (the runbook's ``deploy/pgbouncer/pgbouncer.ini``), and
PgBouncer reaches it through the suite's ``netfault`` proxy, so PostgreSQL
can fail without stopping the machine's server that everything else uses:

1. PgBouncer killed -9 for ``args.bouncer_seconds`` (3 s short, 20 s full);
2. PostgreSQL restarted: every server connection reset and the port refusing
   for 2.4 s (what the drill measured a restart to take);
3. PostgreSQL stopped for ``args.database_seconds`` (5 s short, 30 s full).

Each drill starts an answer in every session first, and opens an AI SDK and
an AG-UI stream on each. Invariants, over all three:

- every tab (socket) and every native SSE reader ends with every seq of its
  session once, in order, and every answer ends ``end_turn``;
- every HTTP answer in the windows is a 200 or a retryable 503 (JSON
  ``unavailable`` and ``Retry-After`` from the API, a page that reloads
  itself), never a 500, and none waits longer than its client's patience;
- no stream (native, AI SDK, AG-UI) is silent longer than its heartbeat and
  a margin: it ends or it goes on;
- every socket close is one its client retries.

Figures: each drill's time from the fault's end to every probe answering
200 again, and to every tab having the whole answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
from chaos_outages import RETRYABLE, Tab, _true, _until
from chaos_verify import Report, _db, _quiet, head_of, stop_reasons
from netfault import NetFault

from sessions_app.log.sessions import create_session
from tests.harness import api_key, session_cookie
from tests.log.test_pgbouncer import PgBouncer

BEAT = 2.0  # the streams' heartbeat here (AGENT_SSE_HEARTBEAT_SECONDS)
MARGIN = 3.0  # what a stream's silence may pass its heartbeat by
ENV = {"AGENT_SSE_HEARTBEAT_SECONDS": str(BEAT), "DATABASE_POOL_MODE": "transaction"}
SESSIONS = 3
PATIENCE = 10.0  # a probe's timeout: an answer slower than this is a hang


class Stream:
    """One HTTP stream read as its bytes arrive: the longest silence of each
    connection (from the request on) and how each ended. ``follow``: the
    native SSE stream, asked again after its cursor whenever it ends."""

    def __init__(self, base: str, key: str, path: str, follow: bool = False) -> None:
        self.base, self.key, self.path, self.follow = base, key, path, follow
        self.silences: list[float] = []
        # The longest silence: how long, when it began, and where (waiting
        # for the answer's head, or in its body after which line).
        self.longest: tuple[float, float, str] = (0.0, 0.0, "")
        self.ends: list[str] = []
        self.seqs: list[int] = []
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        headers = {"Authorization": f"Token {self.key}"}
        timeout = httpx.Timeout(60, read=60)  # far past a heartbeat: a wedge shows
        async with httpx.AsyncClient(base_url=self.base, headers=headers, timeout=timeout) as c:
            while True:
                await self._once(c)
                if not self.follow:
                    return
                await asyncio.sleep(0.5)  # sleep-ok: a reader's backoff between streams

    def _silent(self, began: float, until: float, where: str) -> float:
        if until - began > self.longest[0]:
            self.longest = (until - began, began, where)
        return until - began

    async def _once(self, c: httpx.AsyncClient) -> None:
        last = time.monotonic()
        longest = 0.0
        where = "before the answer's head"
        params = {"after": self.seqs[-1] if self.seqs else 0} if self.follow else None
        try:
            async with c.stream("GET", self.path, params=params) as r:
                longest = self._silent(last, time.monotonic(), where)
                last, where = time.monotonic(), "after the head"
                if r.status_code != 200:
                    await r.aread()
                    self.ends.append(f"status {r.status_code}")
                    return
                async for line in r.aiter_lines():
                    now = time.monotonic()
                    longest, last = max(longest, self._silent(last, now, where)), now
                    where = f"after {line[:40]!r}"
                    if self.follow and line.startswith("id: "):
                        self.seqs.append(int(line[4:]))
            self.ends.append("end")
        except httpx.HTTPError as exc:
            self.ends.append(type(exc).__name__)
        finally:
            end = time.monotonic()
            self.silences.append(max(longest, self._silent(last, end, where + ", to its end")))

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class Prober:
    """The API's session list and the list page, on every daphne, every
    0.25 s: each answer's status, whether a 503 is the retryable kind, and
    how long it took."""

    def __init__(self, cluster, key: str, cookie: str) -> None:
        self.answers: list[tuple[float, str, int | str, bool, float]] = []
        name, value = cookie.split("=", 1)
        self.clients = [
            httpx.AsyncClient(base_url=d.http, timeout=PATIENCE, cookies={name: value})
            for d in cluster.daphnes
        ]
        self.api = {"Authorization": f"Token {key}"}
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.gather(*(self._probe(c, "/api/sessions/") for c in self.clients))
            await asyncio.gather(*(self._probe(c, "/") for c in self.clients))
            await asyncio.sleep(0.25)  # sleep-ok: a probe's period

    async def _probe(self, c: httpx.AsyncClient, path: str) -> None:
        started = time.monotonic()
        target = f"{c.base_url.port}{path}"
        try:
            r = await c.get(path, headers=self.api if path.startswith("/api") else None)
        except httpx.HTTPError as exc:
            self.answers.append((started, target, type(exc).__name__, False, PATIENCE))
            return
        took = time.monotonic() - started
        if r.status_code == 503:
            retry = r.headers.get("Retry-After") == "5"
            if path.startswith("/api"):
                shaped = retry and r.json().get("code") == "unavailable"
            else:
                shaped = retry and 'http-equiv="refresh"' in r.text
        else:
            shaped = r.status_code == 200
        self.answers.append((started, target, r.status_code, shaped, took))

    def all_ok_since(self, since: float) -> float | None:
        """When every target had answered 200 after ``since`` (None: not yet)."""
        firsts: dict[str, float] = {}
        targets = {target for _, target, *_ in self.answers}
        for started, target, status, _, took in self.answers:
            if started >= since and status == 200 and target not in firsts:
                firsts[target] = started + took
        return max(firsts.values()) if targets and set(firsts) == targets else None

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        for c in self.clients:
            await c.aclose()


def _setup():
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="chaos-database")
    sessions = [create_session(user, f"database {i}").id for i in range(SESSIONS)]
    return session_cookie(user), api_key(user), sessions


class Drills:
    """The three faults, one after another, under the same tabs and readers."""

    def __init__(self, cluster, netfault, bouncer, key, cookie, sessions, report) -> None:
        self.cluster, self.netfault, self.bouncer = cluster, netfault, bouncer
        self.key, self.sessions, self.report = key, sessions, report
        urls = cluster.urls()
        self.tabs = [Tab(urls[n % len(urls)], cookie, sid) for n, sid in enumerate(sessions * 2)]
        base = cluster.daphnes[0].http
        self.readers = [
            Stream(base, key, f"/api/sessions/{sid}/stream/", follow=True) for sid in sessions
        ]
        self.dialects: list[Stream] = []
        self.prober = Prober(cluster, key, cookie)
        self.figures: list[str] = []
        self.windows: list[tuple[str, float, float]] = []  # each drill's fault

    async def drill(self, name: str, fault, restore, seconds: float) -> None:
        heads = {sid: await _db(head_of, sid) for sid in self.sessions}
        tokens = int((seconds + 3) * 10)  # an answer that streams through the fault
        async with httpx.AsyncClient(base_url=self.cluster.daphnes[1].http, timeout=30) as http:
            for n, sid in enumerate(self.sessions):
                sent = await http.post(
                    f"/api/sessions/{sid}/messages/",
                    json={"client_message_id": f"{name}-{n}", "text": f"/stream {tokens} 100"},
                    headers={"Authorization": f"Token {self.key}"},
                )
                if sent.status_code not in (200, 201):
                    self.report.fail(f"database: {name}: a send before the fault: {sent.text}")
        # Streaming: every tab has some of the answer.
        await _until(lambda: _true(all(t.last > heads[t.session_id] + 3 for t in self.tabs)), 30)
        base = self.cluster.daphnes[0].http
        for sid in self.sessions:
            self.dialects.append(Stream(base, self.key, f"/api/ai-sdk/chat/{sid}/stream"))
            self.dialects.append(Stream(base, self.key, f"/api/ag-ui/{sid}/stream"))
        await asyncio.to_thread(fault)
        down = time.monotonic()
        await asyncio.sleep(seconds)  # sleep-ok: the fault lasts this long
        await asyncio.to_thread(restore)
        back = time.monotonic()
        self.windows.append((name, down, back))
        await _until(lambda: _true(self.prober.all_ok_since(back)), 60)
        answering = self.prober.all_ok_since(back) - back
        ends = await self._caught_up(60 + seconds)
        going = max(next(at for at in t.arrived if at > back) for t in self.tabs) - back
        self.figures.append(
            f"database: {name} ({back - down:.1f} s): every probe 200 again "
            f"{answering:.2f} s after, every tab's answer going again {going:.2f} s after"
        )
        self.report.check(
            set(ends) == {"end_turn"}, f"database: {name}: every answer ends end_turn ({ends})"
        )

    def _when(self, at: float) -> str:
        """A moment, as a drill's: how long after its fault began."""
        name, down, back = min(self.windows, key=lambda w: abs(at - w[1]))
        return f"began {at - down:+.2f} s from {name!r}, which lasted {back - down:.2f} s"

    async def _caught_up(self, timeout: float) -> list[str]:
        heads: dict[str, int] = {}

        async def done() -> bool:
            heads.update({sid: await _db(head_of, sid) for sid in self.sessions})
            ended = await _db(_quiet, self.sessions)
            return ended and all(t.last == heads[t.session_id] for t in self.tabs)

        await _until(done, timeout, 0.3)
        return await _db(stop_reasons, self.sessions)

    async def finish(self) -> None:
        heads = {sid: await _db(head_of, sid) for sid in self.sessions}
        await _until(
            lambda: _true(
                all(
                    r.seqs and r.seqs[-1] == heads[sid]
                    for r, sid in zip(self.readers, self.sessions, strict=True)
                )
            ),
            30,
        )
        await asyncio.wait_for(asyncio.gather(*(s.task for s in self.dialects)), 30)
        for each in [*self.tabs, *self.readers, self.prober]:
            await each.stop()
        self._verify(heads)

    def _verify(self, heads: dict[str, int]) -> None:
        check = self.report.check
        for line in self.figures:
            self.report.figure(line)
        whole = {sid: list(range(1, heads[sid] + 1)) for sid in self.sessions}
        bad = [t.session_id for t in self.tabs if t.seqs != whole[t.session_id]]
        check(not bad, f"database: every tab has every seq once, in order ({bad})")
        bad = [
            sid for r, sid in zip(self.readers, self.sessions, strict=True) if r.seqs != whole[sid]
        ]
        check(not bad, f"database: every SSE reader has every seq once, in order ({bad})")
        # With the database away an upgrade may be refused 503: retryable too.
        odd = {c for t in self.tabs for c in t.closes} - RETRYABLE - {"http 503"}
        check(not odd, f"database: every socket close retryable ({sorted(map(str, odd))})")
        wrong = [
            (target, status, took)
            for _, target, status, ok, took in self.prober.answers
            if not ok and status != 503
        ]
        unshaped = [(t, s) for _, t, s, ok, _ in self.prober.answers if s == 503 and not ok]
        outages = sum(1 for *_, s, _, _ in self.prober.answers if s == 503)
        check(
            not wrong and not unshaped,
            f"database: {len(self.prober.answers)} probes, {outages} a retryable 503, "
            f"none else: {wrong[:4]} {unshaped[:4]}",
        )
        slowest = max(took for *_, took in self.prober.answers)
        check(slowest < PATIENCE, f"database: the slowest probe answered in {slowest:.2f} s")
        streams = self.readers + self.dialects
        worst = max(streams, key=lambda s: s.longest[0])
        longest, began, where = worst.longest
        check(
            longest <= BEAT + MARGIN,
            f"database: no stream silent past its heartbeat ({BEAT:g} s): the longest "
            f"silence {longest:.2f} s over {len(streams)} streams ({worst.path}: "
            f"{self._when(began)}, {where})",
        )
        ends = sorted({e for s in streams for e in s.ends})
        self.report.figure(f"database: how the streams ended: {ends}")
        # A stream ends whole (its run's end, or at a failed read: its client
        # comes back), or, asked while the database is away, is told 503;
        # never a 500, never cut.
        odd = {e for s in streams for e in s.ends} - {"end", "status 503"}
        check(not odd, f"database: every stream ended cleanly or was told 503 ({sorted(odd)})")


async def database_phase(cluster_for, log_dir, args, report: Report) -> None:
    """``cluster_for(**env)`` starts the servers with this phase's settings."""
    from django.db import connection

    settings = connection.settings_dict
    upstream = (settings.get("HOST") or "127.0.0.1", int(settings.get("PORT") or 5432))
    netfault = NetFault({"pg": upstream}, log_dir / "netfault-database.log")
    bouncer = PgBouncer(log_dir, upstream=("127.0.0.1", netfault.port("pg")), pool=20).start()
    cluster = cluster_for(DATABASE_URL=bouncer.url(), **ENV)
    try:
        cookie, key, sessions = await _db(_setup)
        drills = Drills(cluster, netfault, bouncer, key, cookie, sessions, report)
        await _until(lambda: _true(all(t.live_at for t in drills.tabs)), 30)
        await drills.drill("PgBouncer killed", bouncer.kill, bouncer.start, args.bouncer_seconds)
        await drills.drill(
            "PostgreSQL restarted",
            lambda: netfault.send("pg", "down"),
            lambda: netfault.send("pg", "up"),
            2.4,
        )
        await drills.drill(
            "PostgreSQL stopped",
            lambda: netfault.send("pg", "down"),
            lambda: netfault.send("pg", "up"),
            args.database_seconds,
        )
        await drills.finish()
        logged = "".join(cluster.logs())
        report.figure(
            "database: 'Exception inside application' logged "
            f"{logged.count('Exception inside application')} times, tracebacks "
            f"{cluster.tracebacks()}"
        )
    finally:
        cluster.stop()
        bouncer.stop()
        netfault.stop()
