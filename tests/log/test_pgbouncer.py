"""PostgreSQL behind PgBouncer in transaction mode (``DATABASE_POOL_MODE=transaction``):
a server and two run workers share four server connections, and every promise
holds: exact logs, a gate decided once from another tab, its tool run once, a
kill -9 of a worker mid-answer taken over, a refresh that replays everything."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import signal
import socket
import subprocess

import pytest
from django.db import connection

from sessions_app.models import AgentSession, Run
from sessions_app.runtime.tools import workspace_for
from tests.harness import ROOT, Process, WsClient
from tests.support.rig import Hold
from tests.support.sessions import open_session, send_text, taken_over_once
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

POOL_SIZE = 4


class PgBouncer(Process):
    """Debian's pgbouncer on a free port, transaction pooling, ``POOL_SIZE``
    server connections per database and user (as root it runs as postgres),
    in front of the test database's server or ``upstream`` (host, port)."""

    def __init__(self, log_dir, upstream: tuple[str, int] | None = None, pool: int = POOL_SIZE):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        settings = connection.settings_dict
        users = log_dir / "pgbouncer-users.txt"
        users.write_text('"postgres" ""\n')
        # The runbook's configuration (deploy/pgbouncer/pgbouncer.ini), with
        # this test's port, database, trust and pool size.
        shipped = configparser.ConfigParser(comment_prefixes=(";", "#"))
        shipped.read(ROOT / "deploy" / "pgbouncer" / "pgbouncer.ini")
        ini = dict(shipped["pgbouncer"])
        ini.update(
            listen_port=str(self.port),
            auth_type="trust",
            auth_file=str(users),
            admin_users="postgres",
            default_pool_size=str(pool),
        )
        host, port = upstream or (settings.get("HOST") or "127.0.0.1", settings.get("PORT") or 5432)
        config = log_dir / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n" + "".join(f"{k} = {v}\n" for k, v in ini.items())
        )
        as_root = ["-u", "postgres"] if os.geteuid() == 0 else []
        super().__init__(
            [shutil.which("pgbouncer"), *as_root, str(config)],
            dict(os.environ),
            "pgbouncer",
            log_dir,
        )

    def start(self) -> PgBouncer:
        super().start()
        self.wait_for_log(re.compile(r"process up"))
        return self

    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{connection.settings_dict['NAME']}"

    def show(self, what: str) -> list[dict[str, str]]:
        """``SHOW <what>`` on the admin console: a dict per row, by column."""
        out = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-A"]
            + ["-P", "footer=off", "-c", f"SHOW {what}", "pgbouncer"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        header, *rows = [line.split("|") for line in out.splitlines()]
        return [dict(zip(header, row, strict=True)) for row in rows]


@pytest.fixture
def bouncer(tmp_path):
    if shutil.which("pgbouncer") is None or shutil.which("psql") is None:
        pytest.skip("PGBOUNCER NOT INSTALLED: the transaction-mode pooler is not under test")
    proc = PgBouncer(tmp_path)
    try:
        yield proc.start()
    finally:
        proc.stop()


def _ours(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [row for row in rows if row["database"] == connection.settings_dict["NAME"]]


def _served_transactions(bouncer: PgBouncer) -> int:
    return sum(int(row["total_xact_count"]) for row in _ours(bouncer.show("STATS")))


async def test_every_promise_holds_through_pgbouncer_in_transaction_mode(
    own_server, cookie, bouncer
):
    """A daphne and two workers through PgBouncer (transaction mode, four
    server connections): six answers stream whole, a gate approved from a
    second tab runs its tool once, a worker killed mid-answer is taken over and
    the answer ends once, and a refreshed tab gets exactly 1..head."""
    start, procs = own_server
    server = start(DATABASE_URL=bouncer.url(), DATABASE_POOL_MODE="transaction")
    before = _served_transactions(bouncer)

    tabs = [await open_session(server, cookie) for _ in range(6)]
    for n, (c, _) in enumerate(tabs):
        await send_text(c, "/stream 10 0", f"s{n}")
    for c, _ in tabs:
        end = await c.wait_event(lambda f: f["kind"] == "run.finished")
        assert c.seqs() == list(range(1, end["seq"] + 1))
        deltas = [e["data"]["text"] for e in c.events() if e["kind"] == "assistant.delta"]
        assert deltas == [f"tok{i} " for i in range(10)]

    a, sid = tabs[0]
    b = await WsClient.connect(server.ws, cookie)
    await b.resume(sid, 0)
    await send_text(a, "/write notes.txt hello", "w1")
    gate = await b.wait_event(lambda f: f["kind"] == "approval.requested")
    decided = await b.request(
        {"type": "decide", "approval_id": gate["data"]["approval_id"], "decision": "approve"}
    )
    assert decided["type"] == "decide_ok", decided
    end = await a.wait_event(lambda f: f["kind"] == "run.finished" and f["seq"] > gate["seq"])
    assert end["data"] == {"stop_reason": "end_turn"}
    assert (workspace_for(sid) / "notes.txt").read_text() == "hello\n"

    c, sid = tabs[1]
    hold = Hold(pace=50)
    sent = await send_text(c, hold.text, "k1")
    await c.wait_event(lambda f: f["kind"] == "assistant.delta" and "held10 " in f["data"]["text"])
    holder = await wait_until(lambda: Run.objects.get(id=sent["run_id"]).worker)
    os.kill(int(holder.split(":")[1]), signal.SIGKILL)
    await c.wait_event(lambda f: f["kind"] == "run.resumed", timeout=40)
    hold.release()
    end = await c.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == sent["run_id"], timeout=40
    )
    assert end["data"] == {"stop_reason": "end_turn"}
    [message] = [
        e for e in c.events() if e["kind"] == "assistant.message" and e["run_id"] == sent["run_id"]
    ]
    Hold.answer(message["data"]["text"])

    refreshed = await WsClient.connect(server.ws, cookie)
    ok = await refreshed.resume(sid, 0)
    await refreshed.wait_event(lambda f: f["seq"] == ok["head"])
    assert refreshed.seqs() == list(range(1, ok["head"] + 1))
    assert [e["seq"] for e in refreshed.events()] == c.seqs()[: ok["head"]]

    # It all went through the pooler, on at most its four server connections.
    assert _served_transactions(bouncer) > before
    [pool] = _ours(bouncer.show("POOLS"))
    servers = sum(
        int(pool[k]) for k in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")
    )
    assert 0 < servers <= POOL_SIZE and pool["pool_mode"] == "transaction"
    assert "prepared statement" not in bouncer.log_text()
    for proc in procs:
        assert "prepared statement" not in proc.log_text()
    for tab in [*(c for c, _ in tabs), b, refreshed]:
        await tab.close()


def test_a_stream_ends_within_its_heartbeat_when_pgbouncer_dies(own_server, user, bouncer):
    """PgBouncer killed -9 under an open SSE stream (heartbeat 1 s): the
    stream's next check of the tail fails, and the response ends there, so
    its client comes back with its cursor (the drill's stream got one
    keep-alive and then nothing, for ever). With PgBouncer back, a
    reconnect after that cursor is served."""
    import time

    import httpx

    from sessions_app.log.sessions import create_session
    from tests.harness import api_key

    start, _ = own_server
    server = start(
        DATABASE_URL=bouncer.url(),
        DATABASE_POOL_MODE="transaction",
        AGENT_SSE_HEARTBEAT_SECONDS="1",
    )
    session = create_session(user)
    path = f"/api/sessions/{session.id}/stream/"
    headers = {"Authorization": f"Token {api_key(user)}"}
    with (
        httpx.Client(base_url=server.http, headers=headers) as c,
        c.stream("GET", path, timeout=httpx.Timeout(30, read=30)) as response,
    ):
        lines = response.iter_lines()
        seen: list[str] = []
        while not (seen and seen[-1] == "id: 1"):
            seen.append(next(lines))
        bouncer.kill()
        killed = time.monotonic()
        seen += list(lines)  # to the end of the response
        ended_after = time.monotonic() - killed
    assert ended_after < 5, (ended_after, seen[-5:])
    bouncer.start()
    with (
        httpx.Client(base_url=server.http, headers=headers) as c,
        c.stream("GET", path, params={"after": 1}, timeout=10) as again,
    ):
        assert again.status_code == 200


def test_a_database_outage_is_a_503_that_says_when_and_pages_recover(own_server, user, bouncer):
    """With PgBouncer gone, the API answers 503 JSON (code unavailable) with
    Retry-After, and a page 503 with a page that reloads itself after that
    long, never Django's 500 (the drill's pages showed "Server Error (500)"
    and stayed so); once it is back, both answer 200."""
    import httpx

    from tests.harness import api_key, session_cookie

    start, _ = own_server
    server = start(DATABASE_URL=bouncer.url(), DATABASE_POOL_MODE="transaction")
    key, cookie = api_key(user), session_cookie(user)
    name, value = cookie.split("=", 1)
    with httpx.Client(base_url=server.http, timeout=20, cookies={name: value}) as c:
        assert c.get("/").status_code == 200
        bouncer.kill()
        api = c.get("/api/sessions/", headers={"Authorization": f"Token {key}"})
        assert api.status_code == 503 and api.headers["Retry-After"] == "5", api.text[:300]
        assert api.json()["code"] == "unavailable" and api.json()["retry_after"] == 5
        page = c.get("/")
        assert page.status_code == 503 and page.headers["Retry-After"] == "5"
        assert '<meta http-equiv="refresh" content="5">' in page.text
        bouncer.start()
        assert c.get("/").status_code == 200
        assert c.get("/api/sessions/", headers={"Authorization": f"Token {key}"}).status_code == 200


class HeldSession:
    """The session's row locked FOR UPDATE on a connection of the test's
    own, so the run's next append waits on it inside its query; ``cut``
    ends that waiting query's server connection (as a PostgreSQL restart
    does), then lets go."""

    def __init__(self, session_id: str) -> None:
        import psycopg

        settings = connection.settings_dict
        self.conn = psycopg.connect(
            host=settings.get("HOST") or "127.0.0.1",
            port=settings.get("PORT") or 5432,
            user=settings["USER"],
            dbname=settings["NAME"],
        )
        table = AgentSession._meta.db_table
        self.conn.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE", [session_id])

    def waiting(self) -> list[int]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchall()
        return [pid for (pid,) in rows]

    def cut(self, pids: list[int]) -> None:
        for pid in pids:
            self.conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        self.conn.rollback()
        self.conn.close()


async def test_a_blip_under_an_answer_is_taken_over_at_once(own_server, cookie, bouncer):
    """PostgreSQL ends the server connection of the run's append while it is
    in flight (held on the session's row lock until then). Through PgBouncer
    the worker's own connection lives, so the database is back at once, and
    so is the run: it goes on from its last checkpoint (``run.resumed``, a
    takeover) at once, not when its lease lapses (60 s here; before, it
    waited for that), and ends ``end_turn`` with the whole answer once."""
    import asyncio

    start, _ = own_server
    server = start(
        DATABASE_URL=bouncer.url(), DATABASE_POOL_MODE="transaction", AGENT_LEASE_SECONDS="60"
    )
    c, sid = await open_session(server, cookie)
    hold = Hold(pace=50)
    sent = await send_text(c, hold.text, "m1")
    await c.wait_event(lambda f: f["kind"] == "assistant.delta" and "held5 " in f["data"]["text"])
    held = await asyncio.to_thread(HeldSession, sid)
    pids = await wait_until(lambda: held.waiting())
    await asyncio.to_thread(held.cut, pids)
    await taken_over_once(c, sent["run_id"], hold)
    await c.close()
