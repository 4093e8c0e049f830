"""The chaos suite's ``rolling`` phase (production): the runbook's rolling
restart of the daphnes (SIGTERM one, start it, wait for ``/readyz``, then
the next) behind the recipe's nginx with TLS (``tests/browser/proxy.py``:
``deploy/nginx/agent-sessions.conf`` as shipped), under ``args.rolling_tabs``
tabs (100 short, 200 full) that follow answers streaming in ten sessions.

Invariants:

- every tab closed by a restart is live again within 3 s (the runbook's
  promise, and the issue's);
- nginx answers no 502 and refuses no upgrade: the recipe's upstreams never
  count a restarted daphne as failed (the drill's answered 148 "no live
  upstreams");
- every tab ends with every seq of its session once, in order, and every
  answer ends ``end_turn``; every close is retryable (1012 at a restart).

Figures: the slowest tab's time from its close to its next ``resume_ok``,
and how many closes the restart made.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx
from chaos_outages import RETRYABLE, Tab, _true, _until
from chaos_verify import Report, _db, _quiet, head_of, stop_reasons

from sessions_app.log.sessions import create_session
from tests.browser.proxy import NGINX, deploy
from tests.harness import Daphne, Worker, api_key, session_cookie

SESSIONS = 10
BACK_WITHIN = 3.0


def _setup():
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="chaos-rolling")
    sessions = [create_session(user, f"rolling {i}").id for i in range(SESSIONS)]
    return session_cookie(user), api_key(user), sessions


def _rolling_restart(daphnes) -> None:
    """The runbook's: one daphne at a time, the next once this one is ready."""
    for daphne in daphnes:
        daphne.stop()
        daphne.start_again()  # waits for its first answer
        with urllib.request.urlopen(f"{daphne.http}/readyz", timeout=10) as ready:
            assert ready.status == 200


async def rolling_phase(server_env: dict[str, str], log_dir: Path, args, report: Report) -> None:
    """``server_env``: the suite's servers' settings."""
    if NGINX is None:
        report.fail("rolling: nginx is not installed (apt install nginx-light)")
        return
    workers = [Worker(log_dir, **server_env).start() for _ in range(2)]
    site_dir = Path(tempfile.mkdtemp(prefix="rolling-", dir=log_dir))
    deployment = deploy(lambda **env: Daphne(log_dir, **{**server_env, **env}).start(), site_dir)
    site, daphnes = next(deployment)
    try:
        await _under_tabs(site, daphnes, args, report)
    finally:
        deployment.close()  # nginx stops
        for process in [*daphnes, *workers]:
            process.stop()


async def _under_tabs(site, daphnes, args, report: Report) -> None:
    tls = ssl.create_default_context()
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    cookie, key, sessions = await _db(_setup)
    tabs = [Tab(site.ws, cookie, sessions[n % SESSIONS], tls) for n in range(args.rolling_tabs)]
    await _until(lambda: _true(all(t.live_at for t in tabs)), 60)
    async with httpx.AsyncClient(base_url=site.http, verify=False, timeout=30) as http:  # noqa: S501 (the test's certificate)
        for n, sid in enumerate(sessions):
            sent = await http.post(
                f"/api/sessions/{sid}/messages/",
                json={"client_message_id": f"rolling-{n}", "text": "/stream 100 100"},
                headers={"Authorization": f"Token {key}"},
            )
            if sent.status_code not in (200, 201):
                report.fail(f"rolling: a send through nginx: {sent.status_code} {sent.text}")
    await _until(lambda: _true(all(t.last > 3 for t in tabs)), 30)  # streaming to all
    started = time.monotonic()
    await asyncio.to_thread(_rolling_restart, daphnes)
    restarted = time.monotonic() - started
    await _until(lambda: _true(all(t.closed_at is None for t in tabs)), 30)
    heads: dict[str, int] = {}

    async def caught_up() -> bool:
        heads.update({sid: await _db(head_of, sid) for sid in sessions})
        return await _db(_quiet, sessions) and all(t.last == heads[t.session_id] for t in tabs)

    await _until(caught_up, 60, 0.3)
    for tab in tabs:
        await tab.stop()
    _verify(report, site, tabs, heads, await _db(stop_reasons, sessions), restarted)


def _how_wrong(tab, heads) -> str:
    """What a tab's seqs are, against its session's head (a failure's evidence)."""
    seqs, head = tab.seqs, heads[tab.session_id]
    missing = sorted(set(range(1, head + 1)) - set(seqs))[:10]
    return f": {len(seqs)} seqs {seqs[:3]}..{seqs[-3:]}, head {head}, missing {missing}"


def _verify(report: Report, site, tabs, heads, ends, restarted: float) -> None:
    closes = collections.Counter(c for t in tabs for c in t.closes)
    backs = [b for t in tabs for b in t.back]
    report.figure(
        f"rolling: both daphnes restarted in {restarted:.1f} s under {len(tabs)} tabs; "
        f"closes {dict(closes)}; the slowest tab live again {max(backs, default=0):.2f} s "
        f"after its close"
    )
    report.check(
        backs and max(backs) < BACK_WITHIN,
        f"rolling: every tab live again within {BACK_WITHIN:g} s of its close "
        f"({len(backs)} comebacks)",
    )
    statuses = [line for line in (site.tmp / "access.log").read_text().splitlines()]
    bad = [line for line in statuses if '" 502 ' in line or '" 504 ' in line]
    report.check(not bad, f"rolling: nginx answered no 502 or 504 ({len(bad)}: {bad[:2]})")
    odd = set(closes) - RETRYABLE
    report.check(not odd, f"rolling: every close retryable ({sorted(map(str, odd))})")
    wrong = [t for t in tabs if t.seqs != list(range(1, heads[t.session_id] + 1))]
    report.check(
        not wrong,
        f"rolling: every tab has every seq once, in order ({[t.session_id for t in wrong[:3]]}"
        f"{_how_wrong(wrong[0], heads) if wrong else ''})",
    )
    report.check(set(ends) == {"end_turn"}, f"rolling: every answer ends end_turn ({ends[:3]})")
