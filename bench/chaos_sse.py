"""The chaos suite's SSE phase (``--only sse``; see ``chaos.py``; each step is
blocking code, run on a thread): the SSE
stream under the same faults as the sockets, and what the third security
review tried against it.

- **Cuts.** Readers follow a session over SSE while a writer sends turns;
  each reader drops its connection at random moments and comes back with
  ``Last-Event-ID``; the log is purged under them once (retention). A reader
  told ``reset`` (``cursor_expired``) starts again from ``earliest - 1``, as
  docs/sse.md says. Invariants: every reader's events, from where it
  (re)started, are the log's seqs exactly once, in order; nothing is ever
  received past a hole without a ``reset``.
- **Non-readers.** Streams of a 30k-event log that never read. Invariant:
  daphne's memory stays bounded.
- **Quick closes.** Clients leave as soon as they asked. Invariant: no slot is
  lost (a user's streams still open afterwards).
- **Logout.** A cookie stream, then its cookie signs out. Invariant: the
  stream ends within a second or two.
- **20k runs.** A session of 20,000 runs and 2,000 gates. Invariant: its list
  page and a branch switch answer within a second.
"""

from __future__ import annotations

import random
import re
import secrets
import threading
import time

import httpx
from chaos_phases import Report, _rss_kib

from sessions_app.log.events import purge_events
from sessions_app.models import AgentSession
from tests.access.test_logout import _logout
from tests.harness import api_key, session_cookie
from tests.raw_http import ask_and_leave
from tests.sockets.test_session_limits import _big_log
from tests.web.test_stream_limits import raw_stream_that_never_reads

ID = re.compile(r"^id: (\d+)$")


def _follow(base: str, key: str, session_id: str, stop: threading.Event, rng, out: dict):
    """One SSE reader with random cuts; records what it got and any violation."""
    seqs: list[int] = []
    cursor = 0
    headers = {"Authorization": f"Token {key}"}
    out["begin"].wait(120)  # a reader that comes back late starts after the purge
    with httpx.Client(base_url=base, headers=headers, timeout=30) as c:
        while not stop.is_set() or cursor < out["head"]():
            budget = rng.randint(5, 200)  # events until this reader cuts
            params = {"after": cursor}
            try:
                with c.stream("GET", f"/api/sessions/{session_id}/stream/", params=params) as r:
                    event = None
                    for line in r.iter_lines():
                        if line.startswith("event: "):
                            event = line[7:]
                        m = ID.match(line)
                        if event == "reset" and line.startswith("data: "):
                            earliest = AgentSession.objects.get(id=session_id).earliest
                            out["resets"] += 1
                            cursor = earliest - 1
                            seqs.append(-cursor)  # a restart marker
                            break
                        if m:
                            seq = int(m.group(1))
                            if seq != cursor + 1:
                                out["violations"].append(f"{cursor} -> {seq}")
                            cursor = seq
                            seqs.append(seq)
                            budget -= 1
                            if budget <= 0:
                                break  # a cut
                        if stop.is_set() and cursor >= out["head"]():
                            break
            except httpx.HTTPError:
                pass  # a cut of another kind: come back from the cursor
            if rng.random() < 0.3:
                time.sleep(rng.uniform(0.5, 2))  # sleep-ok: away a while, as a laptop sleeps
    out["seqs"] = seqs


def cuts(cluster, user, session, args, report: Report) -> None:
    rng = random.Random(args.seed + 33)
    key = api_key(user)
    base = cluster.daphnes[0].http
    stop = threading.Event()

    def head() -> int:
        return AgentSession.objects.get(id=session.id).head

    purged = threading.Event()
    at_once = threading.Event()
    at_once.set()
    # The first reader was away until after the purge: its cursor 0 is gone.
    readers = [
        {"violations": [], "resets": 0, "seqs": [], "head": head, "begin": at_once if i else purged}
        for i in range(args.sse_readers)
    ]
    threads = [
        threading.Thread(
            target=_follow,
            args=(base, key, session.id, stop, random.Random(rng.random()), out),
            daemon=True,
        )
        for out in readers
    ]
    for t in threads:
        t.start()
    headers = {"Authorization": f"Token {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as c:
        for turn in range(args.sse_turns):
            while True:
                sent = c.post(
                    f"/api/sessions/{session.id}/messages/",
                    json={"client_message_id": f"sse-{turn}", "text": "/stream 20 5"},
                )
                if sent.status_code != 429:
                    break
                time.sleep(0.5)  # sleep-ok: the user's queue is full; again shortly
            if turn == args.sse_turns // 2:
                # Once there is something to purge: retention under the readers.
                while head() < 60:
                    time.sleep(0.1)  # sleep-ok: a database state no stream announces
                purge_events(session.id, keep=30)
                purged.set()
    deadline = time.monotonic() + 120
    while AgentSession.objects.filter(id=session.id, status="idle").count() == 0:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)  # sleep-ok: a database state no stream announces
    stop.set()
    for t in threads:
        t.join(60)
    final = head()
    bad = sum(len(r["violations"]) for r in readers)
    resets = sum(r["resets"] for r in readers)
    complete = all(r["seqs"] and r["seqs"][-1] == final for r in readers)
    report.figure(f"sse: {len(readers)} readers with random cuts, {resets} resets after a purge")
    report.check(bad == 0, f"sse: seqs out of order or past a hole: {bad}")
    report.check(complete, "sse: every reader reached the head")
    report.check(resets >= 1, "sse: the reader back after the purge was told reset, not skipped")


def non_readers(cluster, user, args, report: Report) -> None:
    daphne = cluster.daphnes[0]
    s = _big_log(user, 30_000, 150)
    cookie = session_cookie(user)
    before = _rss_kib(daphne.proc.pid)
    path = f"/api/sessions/{s.id}/stream/?after=0"
    socks = [
        raw_stream_that_never_reads(daphne.port, path, cookie) for _ in range(args.sse_non_readers)
    ]
    time.sleep(args.hostile_seconds)  # sleep-ok: what they hold while stalled
    growth = (_rss_kib(daphne.proc.pid) - before) / 1024
    for sock in socks:
        sock.close()
    bound = 20 + 3 * len(socks)
    report.check(
        growth < bound,
        f"sse: daphne RSS grew {growth:.0f} MiB under {len(socks)} non-reading streams "
        f"of a 30k-event log (bound {bound})",
    )


def quick_closes(cluster, user, args, report: Report) -> None:
    daphne = cluster.daphnes[0]
    s = AgentSession.objects.filter(owner=user).first()
    cookie = session_cookie(user)
    path = f"/api/sessions/{s.id}/stream/"
    for _ in range(args.sse_quick_closes):
        ask_and_leave(daphne.port, path, cookie)
    name, value = cookie.split("=", 1)
    deadline = time.monotonic() + 20
    opened = False
    with httpx.Client(base_url=daphne.http, cookies={name: value}, timeout=10) as c:
        while not opened and time.monotonic() < deadline:
            with c.stream("GET", path) as one, c.stream("GET", path) as two:
                opened = (one.status_code, two.status_code) == (200, 200)
            if not opened:
                time.sleep(0.2)  # sleep-ok: a slot given back on its timer
    report.check(
        opened, f"sse: streams open after {args.sse_quick_closes} quick closes (no slot lost)"
    )


def logout(cluster, user, args, report: Report) -> None:
    daphne = cluster.daphnes[0]
    s = AgentSession.objects.filter(owner=user).first()
    cookie = session_cookie(user)
    name, value = cookie.split("=", 1)
    ended = threading.Event()

    def read() -> None:
        with httpx.Client(base_url=daphne.http, cookies={name: value}, timeout=30) as c:
            try:
                with c.stream("GET", f"/api/sessions/{s.id}/stream/") as r:
                    for _ in r.iter_raw():
                        pass
            except httpx.HTTPError:
                pass
        ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.5)  # sleep-ok: the stream under way
    began = time.monotonic()
    _logout(daphne, cookie)
    gone = ended.wait(5)
    took = time.monotonic() - began
    report.check(gone and took < 2, f"sse: a logout ended a cookie stream in {took:.2f} s")


def twenty_k_runs(cluster, user, args, report: Report) -> None:
    from tests.log.test_sessions import _crowded

    # Fresh ids each run: the chaos database outlives a run.
    tag = f"{secrets.token_hex(3)}_"
    s = _crowded(user, 20_000, 2_000, 1, 2, tag)
    key = api_key(user)
    cookie = session_cookie(user)
    daphne = cluster.daphnes[0]
    name, value = cookie.split("=", 1)
    with httpx.Client(base_url=daphne.http, cookies={name: value}, timeout=60) as c:
        began = time.monotonic()
        page = c.get("/")
        listed = time.monotonic() - began
    headers = {"Authorization": f"Token {key}"}
    with httpx.Client(base_url=daphne.http, headers=headers, timeout=60) as c:
        began = time.monotonic()
        tree = c.get(f"/api/sessions/{s.id}/tree/")
        switched = c.post(f"/api/sessions/{s.id}/branch/", json={"run_id": f"run_{tag}000005"})
        took = time.monotonic() - began
    report.check(
        page.status_code == 200 and listed < 1.0,
        f"sse: the list page with a 20k-run session answered in {listed:.2f} s",
    )
    report.check(
        tree.status_code == 200 and switched.status_code == 200 and took < 3.0,
        f"sse: the tree and a switch of a 20k-run session took {took:.2f} s",
    )
