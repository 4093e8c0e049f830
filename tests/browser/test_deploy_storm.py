"""A reconnect storm through the deployment recipe's nginx (TLS, two daphnes,
PostgreSQL and Redis): 2,000 sockets at once, none dropped, none failed."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import random
import ssl
import time

import pytest
import websockets

from tests.browser.proxy import deploy
from tests.harness import listen_overflows

pytestmark = pytest.mark.postgres


@pytest.fixture
def deployment(daphnes, tmp_path):
    yield from deploy(daphnes, tmp_path)


STORM_SOCKETS = 2000
STORM_USERS = 50  # 40 sockets each, under AGENT_USER_MAX_SOCKETS
FINAL_CLOSES = {4400, 4401, 4403}


def _storm_sessions() -> list[tuple[object, str]]:
    """A session per user, five events long, and the user's cookie."""
    from django.contrib.auth import get_user_model

    from tests.harness import session_cookie
    from tests.logs_made import session_with_deltas

    out = []
    for i in range(STORM_USERS):
        user = get_user_model().objects.create_user(f"storm{i}")
        out.append((session_with_deltas(user, 5, f"storm {i}"), session_cookie(user)))
    return out


async def _storm(site, sessions) -> dict:
    """Every socket at once, each resuming three events behind and held open
    until all have caught up; retried with backoff after any failure."""

    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    seen = {"caught_up": 0, "retries": 0, "statuses": collections.Counter()}
    seen["closes"] = collections.Counter()
    everyone_in = asyncio.Event()

    async def tab(session, cookie) -> None:
        for attempt in range(20):
            if attempt:
                seen["retries"] += 1
                pause = random.uniform(0, min(10, 0.25 * 2**attempt))
                await asyncio.sleep(pause)  # sleep-ok: the browser's backoff
            try:
                async with websockets.connect(
                    site.ws,
                    ssl=tls,
                    origin=site.http,
                    additional_headers={"Cookie": cookie},
                    open_timeout=60,
                    ping_interval=None,
                ) as ws:
                    resume = {"type": "resume", "protocol": 1, "session_id": session.id}
                    resume |= {"after": session.head - 3, "epoch": session.epoch}
                    await ws.send(json.dumps(resume))
                    async for raw in ws:
                        frame = json.loads(raw)
                        if frame["type"] == "event" and frame["seq"] == session.head:
                            seen["caught_up"] += 1
                            if seen["caught_up"] == STORM_SOCKETS:
                                everyone_in.set()
                            await everyone_in.wait()
                            return
                    seen["closes"][ws.close_code] += 1
                    if ws.close_code in FINAL_CLOSES:
                        return
            except websockets.InvalidStatus as exc:
                seen["statuses"][exc.response.status_code] += 1
            except (OSError, TimeoutError, websockets.WebSocketException) as exc:
                seen["closes"][type(exc).__name__] += 1

    began = time.monotonic()
    tabs = [tab(*sessions[n % len(sessions)]) for n in range(STORM_SOCKETS)]
    try:
        async with asyncio.timeout(120):  # a proxy too small hangs, not fails
            await asyncio.gather(*tabs)
    except TimeoutError:
        seen["timed_out"] = True
    seen["seconds"] = round(time.monotonic() - began, 2)
    return seen


@pytest.mark.timeout(300)  # the storm's own limit is 120 s, and setting up takes some
def test_a_storm_of_2000_sockets_through_the_proxy_drops_and_fails_none(deployment):
    """2,000 sockets resume at once through nginx (TLS, the runbook's
    worker_connections, worker_rlimit_nofile and listen backlog) onto two
    daphnes: every one catches up, the kernel drops no connection, and nothing
    answers 5xx or closes a tab for good."""

    site, _ = deployment
    sessions = _storm_sessions()
    dropped_before = listen_overflows()
    # Its own thread and loop: Playwright's sync API holds this thread's.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        seen = pool.submit(asyncio.run, _storm(site, sessions)).result()
    print("storm through nginx:", seen)
    assert seen["caught_up"] == STORM_SOCKETS, seen
    assert not [code for code in seen["statuses"] if code >= 500], seen
    assert not FINAL_CLOSES & set(seen["closes"]), seen
    assert listen_overflows() == dropped_before, "the kernel dropped connections"
    errors = (site.tmp / "error.log").read_text()
    assert "worker_connections are not enough" not in errors
