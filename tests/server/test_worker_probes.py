"""A real run worker's own probes port (sessions_app/server/probes.py,
run_agent_worker); the in-process tests are test_probes.py."""

from __future__ import annotations

import asyncio
import re

import pytest
from django.conf import settings

from tests.harness import Worker
from tests.support.clients import http_get
from tests.support.sessions import open_session, send_text

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_worker_serves_its_metrics_and_health_on_its_own_port(own_server, cookie, tmp_path):
    """With AGENT_WORKER_METRICS_PORT, each run worker serves /metrics (its own
    appends, group commits and runs), /healthz and /readyz; /metrics needs the
    token when one is set."""
    if settings.AGENT_RUNNER != "worker":
        pytest.skip("embedded profile: runs execute in the server, there is no worker")
    import socket

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    start, procs = own_server
    server = start()
    for proc in [p for p in procs if isinstance(p, Worker)]:
        proc.kill()  # one worker, so that it is the one that runs this
    procs.append(
        Worker(
            tmp_path, AGENT_WORKER_METRICS_PORT=str(port), AGENT_METRICS_TOKEN="scrape-me"
        ).start()
    )
    c, sid = await open_session(server, cookie)
    sent = await send_text(c, "/stream 3 0", "m1")
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == sent["run_id"])
    await c.close()

    def get(path: str, token: str | None = None) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{port}{path}", token)

    assert await asyncio.to_thread(get, "/healthz") == (200, "ok")
    assert await asyncio.to_thread(get, "/readyz") == (200, "ready")
    assert (await asyncio.to_thread(get, "/metrics"))[0] == 404
    status, text = await asyncio.to_thread(get, "/metrics", "scrape-me")
    assert status == 200
    appends = re.search(r"^agent_append_seconds_count (\S+)$", text, re.M)
    assert appends and float(appends.group(1)) >= 1, "this worker's appends are counted"
    commits = re.search(r"^agent_group_commit_appends_count (\S+)$", text, re.M)
    assert commits and float(commits.group(1)) >= 1, "and its group commits"
    assert "agent_runs{" not in text, "the database-wide gauges are a daphne's /metrics/database"
