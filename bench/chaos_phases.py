"""The chaos suite's phases beyond the raw tabs: faults, Chromium tabs and
fuzz (see ``chaos.py``; what every phase ends with is ``chaos_verify``)."""

from __future__ import annotations

import asyncio
import collections
import json
import random
import subprocess
import threading
import time
from pathlib import Path

import websockets
from chaos_fuzz import FrameGenerator
from chaos_verify import Report, _db, _quiet, wait_quiet
from django.db import close_old_connections
from django.utils import timezone

from sessions_app.models import AgentSession, Event, Run
from tests.harness import WsClient, session_cookie

raw_tabs_done = threading.Event()

__all__ = ["Report", "browser_phase", "fault_loop", "fuzz_phase", "raw_tabs_done", "wait_quiet"]


# --- faults (production profile) ----------------------------------------------------------


async def _probe(cluster, session, cookie, t0: float) -> tuple[float, float]:
    """Seconds until a fresh socket (of a user of its own) has resumed and had a
    message accepted (``send_ok``), and until that message's run finished (which
    also waits for a free worker slot under the load), counted from ``t0``."""
    attempt = 0
    accepted = None
    cmid = f"probe-{t0}"
    while time.monotonic() - t0 < 120:
        attempt += 1
        c = None
        try:
            c = await WsClient.connect(random.choice(cluster.urls()), cookie)
            ok = await c.resume(session.id, 0, timeout=10)
            if ok["type"] == "resume_ok":
                sent = await c.request(
                    {"type": "send", "client_message_id": cmid, "text": "hi"}, timeout=10
                )
                accepted = accepted or time.monotonic() - t0
                await c.wait_event(
                    lambda f, r=sent["run_id"]: f["kind"] == "run.finished" and f["run_id"] == r,
                    timeout=60,
                )
                return accepted, time.monotonic() - t0
        except Exception:
            await asyncio.sleep(min(1.0, 0.1 * attempt))
        finally:
            if c is not None:
                await c.close()
    return accepted or float("inf"), float("inf")


def _restart_postgres() -> None:
    versions = subprocess.run(["ls", "/etc/postgresql"], capture_output=True, text=True)
    version = versions.stdout.split()[0]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "-m", "fast"],
        check=True,
        capture_output=True,
    )


def _held_by(pid: int) -> list[str]:
    return list(
        Run.objects.filter(status=Run.Status.RUNNING, worker__contains=f":{pid}:").values_list(
            "id", flat=True
        )
    )


def _went_on(run_ids, since) -> dict[str, tuple]:
    """Per run: when it went on after ``since`` (its run.resumed, or its end)
    and how (``takeover``, ``handover``, or the stop reason)."""
    out = {}
    for run_id, at, data in Event.objects.filter(
        run_id__in=run_ids, kind="run.resumed", created_at__gte=since
    ).values_list("run_id", "created_at", "data"):
        out.setdefault(run_id, (at, data.get("reason", "")))
    for run_id, at, reason in Run.objects.filter(
        id__in=run_ids, status=Run.Status.FINISHED
    ).values_list("id", "finished_at", "stop_reason"):
        out.setdefault(run_id, (at, reason))
    return out


async def _worker_kill(cluster, report: Report, probing) -> tuple[float, float]:
    """kill -9 of the worker holding most runs: each is taken over from its last
    checkpoint (run.resumed) within the lease (3 s here) plus a sweep (1 s)
    plus a little, by the survivors' sweepers; none is finished 'interrupted'.
    ``probing()`` starts the probe the moment the worker is dead."""
    held: list[str] = []
    deadline = time.monotonic() + 20
    while not held and time.monotonic() < deadline:
        holding = [await _db(_held_by, w.proc.pid) for w in cluster.workers]
        index = max(range(len(holding)), key=lambda i: len(holding[i]))
        held = holding[index]
        if not held:
            await asyncio.sleep(0.1)  # a database state no frame announces
    pid = cluster.workers[index].proc.pid
    t0 = timezone.now()
    cluster.workers[index].kill()
    probe = probing()
    await asyncio.to_thread(cluster.replace_worker, index)
    # What the dead worker still held (a run may have ended just before the kill).
    held = await _db(_held_by, pid)
    deadline = time.monotonic() + 30
    done: dict = {}
    while time.monotonic() < deadline:
        done = await _db(_went_on, held, t0)
        if len(done) == len(held):
            break
        await asyncio.sleep(0.2)  # a database state no frame announces
    waits = sorted((at - t0).total_seconds() for at, _ in done.values())
    reasons = collections.Counter(reason for _, reason in done.values())
    report.check(
        len(done) == len(held)
        and "interrupted" not in reasons
        and (not waits or waits[-1] <= 3 + 1 + 3),
        f"kill -9 of a worker holding {len(held)} runs: {len(done)} went on "
        f"{dict(reasons)}, the last {waits[-1] if waits else 0:.1f} s after (bound 7 s)",
    )
    return await probe


async def fault_loop(cluster, redis, args, report: Report, probe) -> None:
    """One of each fault while the tabs cut and stream, each followed by a probe."""
    faults = ["daphne", "worker"] + (["redis"] if redis is not None else [])
    if redis is None:
        report.figure("no redis-server binary here: the Redis restart is not exercised")
    faults += ["postgres"] if args.pg_restart else []
    for fault in faults:
        await asyncio.sleep(2.5)  # let streams and gates get going between faults
        t_fault = time.monotonic()
        if fault == "daphne":
            await asyncio.to_thread(cluster.restart_daphne, random.randrange(len(cluster.daphnes)))
        elif fault == "worker":
            accepted, finished = await _worker_kill(
                cluster,
                report,
                lambda t=t_fault: asyncio.ensure_future(_probe(cluster, *probe, t)),
            )
        elif fault == "redis":
            redis.kill()
            await asyncio.sleep(1)  # Redis stays away for a second
            await asyncio.to_thread(redis.start)
        elif fault == "postgres":
            await asyncio.to_thread(_restart_postgres)
        if fault != "worker":
            accepted, finished = await _probe(cluster, *probe, t_fault)
        report.check(
            accepted < 30,
            f"{fault} killed/restarted: from the kill, a fresh tab resumed and had a "
            f"message accepted in {accepted:.1f} s, its run finished in {finished:.1f} s",
        )


# --- Chromium tabs -----------------------------------------------------------------------


def _load(page, url: str) -> None:
    """Load ``url`` as a person would while a server restarts: again until it loads."""
    deadline = time.monotonic() + 60
    while True:
        try:
            page.goto(url)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            page.wait_for_timeout(500)  # a person pressing reload again


BROWSER_ACTIONS = (
    "drop",
    "after-receive",
    "after-render",
    "after-send",
    "reload",
    "offline",
    "branch",
)


def browser_phase(cluster, sessions, user, args, report: Report) -> None:
    """Chromium tabs following the cut sessions, themselves cut by the test hooks."""
    from playwright.sync_api import sync_playwright

    from tests.browser.helpers import assert_shows_log, expect_live, send, wait_cursor

    close_old_connections()
    rng = random.Random(args.seed + 7)
    name, value = session_cookie(user).split("=", 1)
    actions = collections.Counter()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--disable-background-networking", "--disable-component-update"],
        )
        context = browser.new_context()
        pages = []
        for i in range(args.browser):
            server = cluster.daphnes[i % len(cluster.daphnes)]
            context.add_cookies([{"name": name, "value": value, "url": server.http}])
            page = context.new_page()
            session = sessions[i % len(sessions)]
            _load(page, f"{server.http}/s/{session.id}/")
            expect_live(page, timeout=60_000)
            pages.append((page, session, server))
        for _ in range(args.browser_cuts):
            page, session, server = rng.choice(pages)
            action = rng.choice(BROWSER_ACTIONS)
            actions[action] += 1
            try:
                expect_live(page, timeout=60_000)
                if action == "drop":
                    page.evaluate("() => window.__test.dropSocket()")
                elif action == "reload":
                    _load(page, page.url)
                elif action == "branch":
                    # Another version where the path shows one, else a regenerate.
                    other = page.locator("[data-testid=branch-nav]:visible button:enabled")
                    regenerate = page.locator("[data-testid=regenerate]:visible")
                    if other.count():
                        other.nth(rng.randrange(other.count())).click()
                    elif regenerate.count():
                        regenerate.last.click()
                elif action == "offline":
                    context.set_offline(True)
                    # How long the network stays away is the fault itself.
                    page.wait_for_timeout(rng.uniform(50, 500))
                    context.set_offline(False)
                else:
                    page.evaluate(f"() => window.__test.failpoint({json.dumps(action)})")
                    if action == "after-send":
                        send(page, "/stream 5 5")
            except Exception as exc:
                report.fail(f"browser tab: {action} failed: {exc!r}")
        raw_tabs_done.wait(args.timeout)
        close_old_connections()
        # Each tab's own messages (an after-send cut re-sends one on its next
        # resume) are on the server before the runs are waited for.
        for page, _, _ in pages:
            expect_live(page, timeout=60_000)
            page.wait_for_function(
                "() => window.__test.state().ledger"
                ".every((e) => e.state === 'confirmed' || e.state === 'failed')",
                timeout=60_000,
            )
        deadline = time.monotonic() + 120
        while not _quiet([s.id for _, s, _ in pages]) and time.monotonic() < deadline:
            time.sleep(0.2)  # a database state no frame announces
        bad = []
        for page, session, _server in pages:
            head = AgentSession.objects.get(id=session.id).head
            try:
                expect_live(page, timeout=60_000)
                wait_cursor(page, head, timeout=60_000)
                assert_shows_log(page, session.id)
                stats = page.evaluate("() => window.__test.state().stats")
                if stats.get("duplicates"):
                    bad.append(f"{session.id}: {stats['duplicates']} duplicates")
            except Exception as exc:
                bad.append(f"{session.id}: {str(exc)[:300]}")
        browser.close()
    report.figure(
        f"{len(pages)} Chromium tabs, {sum(actions.values())} cuts "
        f"({', '.join(f'{k} {v}' for k, v in sorted(actions.items()))})"
    )
    report.check(
        not bad, f"every Chromium tab shows the active path of the server's log exactly: {bad[:3]}"
    )


# --- fuzz --------------------------------------------------------------------------------

FUZZ_CLOSES = {1000, 4400, 4408, 4413, 4429}  # documented answers to a hostile client


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def fuzz_phase(cluster, user, session, args, report: Report) -> None:
    cookie = await _db(session_cookie, user)
    daphne = cluster.daphnes[0]
    rss_before = _rss_kib(daphne.proc.pid)
    tracebacks_before = cluster.tracebacks()
    approval = "ap_" + "x" * 22
    sent = 0
    closes: collections.Counter = collections.Counter()
    replies: collections.Counter = collections.Counter()
    t0 = time.monotonic()

    async def one_socket(index: int) -> None:
        nonlocal sent
        gen = FrameGenerator(args.seed * 1000 + index, session.id, approval, "r_" + "y" * 22)
        while sent < args.fuzz_frames:
            try:
                ws = await websockets.connect(
                    daphne.ws,
                    origin=daphne.http,
                    additional_headers={"Cookie": cookie},
                    max_size=2**24,
                    ping_interval=None,
                )
            except Exception:
                await asyncio.sleep(0.1)
                continue

            answered = asyncio.Event()

            async def drain(ws=ws, answered=answered):
                async for raw in ws:
                    try:
                        reply = json.loads(raw)
                    except ValueError:
                        replies["not json"] += 1
                        continue
                    replies[reply.get("type")] += 1
                    if reply.get("request_id") == "fuzz-end":
                        answered.set()

            reader = asyncio.ensure_future(drain())
            try:
                if gen.rng.random() < 0.7:
                    await ws.send(
                        json.dumps(
                            {"type": "resume", "protocol": 1, "session_id": session.id, "after": 0}
                        )
                    )
                for _ in range(gen.rng.randint(1, 80)):
                    await ws.send(gen.frame())
                    sent += 1
                # Every frame answered (or the socket closed) before closing.
                await ws.send(json.dumps({"type": "ping", "request_id": "fuzz-end"}))
                waiting = asyncio.ensure_future(answered.wait())
                await asyncio.wait([reader, waiting], timeout=10, return_when="FIRST_COMPLETED")
                waiting.cancel()
                await ws.close()
            except websockets.ConnectionClosed:
                pass
            await asyncio.gather(reader, return_exceptions=True)
            closes[ws.close_code] += 1

    await asyncio.gather(*(one_socket(i) for i in range(8)))
    elapsed = time.monotonic() - t0
    rss_after = _rss_kib(daphne.proc.pid)
    unexpected = {c: n for c, n in closes.items() if c not in FUZZ_CLOSES | {1006}}
    # A server closing a socket whose client is still writing (4413 on a huge
    # frame, 4429) can reset the TCP connection before its close frame is read:
    # the client sees 1006, which clients retry. Rare, so bounded, not banned.
    resets = closes.get(1006, 0)
    report.check(
        resets <= max(1, sum(closes.values()) // 100),
        f"fuzz: connections reset instead of closed: {resets} (bound 1%)",
    )
    report.figure(
        f"fuzz: {sent:,} frames over {sum(closes.values()):,} sockets in {elapsed:.1f} s; "
        f"closes {dict(sorted(closes.items(), key=str))}; replies {dict(replies.most_common(6))}"
    )
    report.check(not unexpected, f"fuzz: only documented closes: unexpected {unexpected}")
    tracebacks = cluster.tracebacks() - tracebacks_before
    report.check(tracebacks == 0, f"fuzz: tracebacks in the server logs: {tracebacks}")
    growth = (rss_after - rss_before) / 1024
    report.check(
        growth < 200,
        f"fuzz: daphne RSS {rss_before / 1024:.0f} -> "
        f"{rss_after / 1024:.0f} MiB (growth {growth:.0f} MiB, bound 200)",
    )
