"""Real processes for integration tests: daphne servers and run workers.

Servers run as subprocesses on free ports against the test database (the
pytest-django one), log to files (a full pipe would block them) and are
stopped by PID. ``WsClient`` is a thin protocol client on ``websockets`` that
waits for frames by predicate, never by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import websockets
from django.conf import settings
from django.db import connection
from django.test import Client

ROOT = Path(__file__).resolve().parent.parent
# Where the servers' code comes from: this tree, or another checkout of the
# project (bench/ab.py points it at a worktree of the revision it compares).
SERVER_ROOT = Path(os.environ.get("AGENT_SERVER_ROOT") or ROOT).resolve()
_LISTEN = re.compile(r"Listening on TCP address 127\.0\.0\.1:(\d+)")


def database_url() -> str:
    """The URL of the test database the current pytest process uses."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}@{host}:{port}/{db['NAME']}"


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_ALLOW_ASYNC_UNSAFE",)}
    env.update(
        DATABASE_URL=database_url(),
        AGENT_WORKSPACES=str(settings.AGENT_WORKSPACES),
        AGENT_VAR_DIR=str(settings.VAR_DIR),
        AGENT_TEST_HOOKS="1",
        PYTHONUNBUFFERED="1",
    )
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
        env["CHANNELS_PREFIX"] = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    env["AGENT_RUNNER"] = settings.AGENT_RUNNER
    if SERVER_ROOT != ROOT:
        env["PYTHONPATH"] = str(SERVER_ROOT)
    env.update(extra)
    return env


def named_connections(app_name: str, terminate: bool = False) -> int:
    """The connections to the test database of the servers started with
    ``PGAPPNAME=app_name`` (libpq's): how many, or with ``terminate`` ended
    by PostgreSQL as its restart ends them (``pg_terminate_backend``). The
    suite's shared servers use the same database; a name keeps them out."""
    counted = "pg_terminate_backend(pid)" if terminate else "*"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count({counted}) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [app_name],
        )
        return cursor.fetchone()[0]


class Process:
    """A subprocess whose output a reader thread copies to a log file.

    Reading the pipe continuously means the child never blocks on a full
    pipe, and waiting for a log line is waiting on a condition, not polling.
    """

    _ids = itertools.count()

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        name: str,
        log_dir: Path,
        cwd: Path = SERVER_ROOT,
    ):
        self.args, self.env, self.name, self.cwd = args, env, name, cwd
        self.log_path = log_dir / f"{name}-{next(self._ids)}.log"
        self.proc: subprocess.Popen | None = None
        # Lines as they come (appending to one growing string copies it every
        # time: a server logging 25,000 lines in a storm kept the pump so busy
        # that the server blocked writing to the full pipe).
        self._lines: list[str] = []
        self._changed = threading.Condition()

    def start(self) -> Process:
        self._lines = []
        self.proc = subprocess.Popen(
            self.args,
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._pump_thread = threading.Thread(target=self._pump, args=(self.proc,), daemon=True)
        self._pump_thread.start()
        return self

    def _pump(self, proc: subprocess.Popen) -> None:
        with open(self.log_path, "ab") as log:
            for line in iter(proc.stdout.readline, b""):
                log.write(line)
                log.flush()
                with self._changed:
                    self._lines.append(line.decode(errors="replace"))
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def log_text(self) -> str:
        return "".join(self._lines)

    def wait_for_log(self, pattern: re.Pattern, timeout: float = 30) -> re.Match:
        deadline = time.monotonic() + timeout
        searched = 0  # lines already searched: the patterns match within a line
        with self._changed:
            while True:
                for line in self._lines[searched:]:
                    match = pattern.search(line)
                    if match:
                        return match
                searched = len(self._lines)
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited:\n{self.log_text()[-4000:]}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"{self.name} did not log {pattern.pattern}:\n{self.log_text()[-4000:]}"
                    )
                self._changed.wait(min(remaining, 1.0))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            self.proc.wait(40)  # a stopped worker may take its grace period
            # The output of the dead process is read to its end before a
            # restart resets what wait_for_log searches.
            self._pump_thread.join(5)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


# The accept queue every daphne here listens with (daphne's own -b/-p give
# Twisted's 50, which a reconnect storm overflows: docs/benchmarks.md).
LISTEN_BACKLOG = 4096


def daphne_endpoint(port: int, tls=None, backlog: int = LISTEN_BACKLOG) -> str:
    """daphne's ``-e`` endpoint for 127.0.0.1:``port`` with a large backlog
    (``tls``: a (key, certificate) pair for daphne's own TLS)."""
    if tls:
        key, cert = tls
        return (
            f"ssl:port={port}:interface=127.0.0.1:backlog={backlog}:privateKey={key}:certKey={cert}"
        )
    return f"tcp:port={port}:interface=127.0.0.1:backlog={backlog}"


def listen_overflows() -> int:
    """The kernel's count of connections dropped because an accept queue was
    full (``TcpExt: ListenOverflows`` in /proc/net/netstat), machine-wide."""
    with open("/proc/net/netstat") as f:
        lines = [line.split() for line in f if line.startswith("TcpExt:")]
    names, values = lines[0], lines[1]
    return int(values[names.index("ListenOverflows")])


class Daphne(Process):
    """``daphne agentsite.asgi:application`` on a free (or given) port."""

    def __init__(
        self,
        log_dir: Path,
        port: int = 0,
        connect_timeout: float | None = None,
        tls=None,
        backlog: int = LISTEN_BACKLOG,
        args: tuple[str, ...] = (),
        **env: str,
    ):
        # daphne gives up on an upgrade its application has not accepted within
        # --websocket_connect_timeout (5 s by default; WSREJECT in its log).
        extra = ["--websocket_connect_timeout", str(connect_timeout)] if connect_timeout else []
        extra += args  # daphne's own options (the units' --verbosity 0, say)
        super().__init__(
            [
                sys.executable,
                "-m",
                "daphne",
                "-e",
                daphne_endpoint(port, tls, backlog),
                *extra,
                "agentsite.asgi:application",
            ],
            server_env(**env),
            "daphne",
            log_dir,
        )
        self.port = port
        self.tls = tls
        self.backlog = backlog
        self.extra_env = env

    def start(self) -> Daphne:
        super().start()
        self.port = int(self.wait_for_log(_LISTEN).group(1))
        # The first HTTP request registers the loop and runs start-up recovery.
        import urllib.request

        context = None
        if self.tls:
            import ssl

            context = ssl._create_unverified_context()  # noqa: S323 (the test's own certificate)
        urllib.request.urlopen(f"{self.http}/healthz", timeout=10, context=context).read()
        return self

    def restart(self) -> Daphne:
        """Kill -9 and start again on the same port, with the same environment."""
        self.kill()
        return self.start_again()

    def start_again(self) -> Daphne:
        """Start a new daphne on this one's port, with the same environment
        (after ``stop`` or ``kill``)."""
        self.__init__(  # type: ignore[misc]
            self.log_path.parent,
            port=self.port,
            tls=self.tls,
            backlog=self.backlog,
            **self.extra_env,
        )
        return self.start()

    @property
    def http(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}/ws/sessions/"


class Worker(Process):
    """``manage.py run_agent_worker`` (production profile)."""

    def __init__(self, log_dir: Path, **env: str):
        super().__init__(
            [sys.executable, "manage.py", "run_agent_worker"],
            server_env(**env),
            "worker",
            log_dir,
        )

    def start(self) -> Worker:
        super().start()
        self.wait_for_log(re.compile(r"run worker \S+ started"))
        return self


def session_cookie(user) -> str:
    """A logged-in session cookie for ``user`` (written to the test database)."""
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


class WsClient:
    """A protocol client: sends frames, collects every frame, waits by predicate."""

    _rids = itertools.count(1)

    def __init__(self, ws):
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # time.time() of each frame (benchmarks)
        self._new = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())
        self.closed_code: int | None = None

    @classmethod
    async def connect(cls, url: str, cookie: str | None, origin: str | None = None, tls=None):
        """Open a socket to ``url`` with ``cookie``, from the server's own origin
        (``http://host:port`` of the URL) unless ``origin`` says otherwise;
        ``tls``: the SSL context of a ``wss`` URL (a test's own certificate)."""
        if origin is None:
            origin = "http" + url.removeprefix("ws").split("/ws/", 1)[0]
        headers = {"Cookie": cookie} if cookie else {}
        ws = await websockets.connect(
            url,
            origin=origin,
            additional_headers=headers,
            max_size=2**24,
            ping_interval=None,
            **({"ssl": tls} if tls is not None else {}),
        )
        return cls(ws)

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                self.arrivals.append(time.time())
                self.frames.append(json.loads(raw))
                self._new.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed_code = self.ws.close_code
            self._new.set()

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(frame))

    async def send_raw(self, raw: str | bytes) -> None:
        await self.ws.send(raw)

    def rid(self) -> str:
        return f"r{next(self._rids)}"

    async def wait(self, predicate, timeout: float = 20.0) -> dict[str, Any]:
        """The first frame (seen so far or arriving) matching ``predicate``."""
        deadline = asyncio.get_running_loop().time() + timeout
        index = 0
        while True:
            while index < len(self.frames):
                if predicate(self.frames[index]):
                    return self.frames[index]
                index += 1
            if self.closed_code is not None and self._reader.done():
                raise ConnectionError(f"closed with {self.closed_code} while waiting")
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TimeoutError(f"no matching frame; last: {self.frames[-5:]}")
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), remaining)

    async def request(self, frame: dict[str, Any], timeout: float = 20.0) -> dict[str, Any]:
        """Send a command and return the reply carrying its request id."""
        frame = {**frame, "request_id": frame.get("request_id") or self.rid()}
        await self.send(frame)
        rid = frame["request_id"]
        return await self.wait(lambda f: f.get("request_id") == rid, timeout)

    async def wait_closed(self, timeout: float = 20.0) -> int:
        await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        return self.closed_code

    def events(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("type") == "event"]

    def seqs(self) -> list[int]:
        return [f["seq"] for f in self.events()]

    async def wait_event(self, predicate, timeout: float = 20.0) -> dict[str, Any]:
        return await self.wait(lambda f: f.get("type") == "event" and predicate(f), timeout)

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()

    async def start(self, title: str = "", tab_id: str = "t-test") -> dict[str, Any]:
        return await self.request(
            {"type": "start", "protocol": 1, "tab_id": tab_id, "title": title}
        )

    async def resume(self, session_id: str, after: int = 0, epoch: str | None = None, **kw):
        frame = {
            "type": "resume",
            "protocol": 1,
            "tab_id": "t-test",
            "session_id": session_id,
            "after": after,
            **kw,
        }
        if epoch is not None:
            frame["epoch"] = epoch
        return await self.request(frame)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def api_key(user, **kw) -> str:
    """A new API key of ``user`` (``Authorization: Token <key>``)."""
    from sessions_app.access.tokens import issue

    return issue(user, **kw)[1]


def key_works(key: str) -> bool:
    """Does ``key`` still sign in?"""
    from sessions_app.access.tokens import token_user

    return token_user(f"Token {key}") is not None
