"""Prometheus metrics, the readiness check, and the views that serve them.

Per process (each daphne and each worker counts what it does; scrape each
server's ``/metrics``): open sockets, handshakes by type and outcome (``ok``
or the rejection reason), closes by code, replay sizes and durations, append
latency, and publishing lag (from an append's commit to its hand-off to the
channel layer). From the database, at each scrape of ``/metrics/database``
(one series for the whole deployment: scrape it from one server, since
every server would read the same rows): runs by status and the approval
gates waiting. Both are for staff users or for a scraper with
``Authorization: Bearer $AGENT_METRICS_TOKEN``; anyone else gets 404.

``/readyz`` answers 200 when the database and the channel layer both work
(a query, and a message sent to and received from a fresh channel), 503 with
what failed otherwise; ``/healthz`` (liveness) touches neither.
"""

from __future__ import annotations

import asyncio
import hmac
import logging

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Count
from django.http import Http404, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from sessions_app.models import ApprovalRequest, Run
from sessions_app.wire import protocol

log = logging.getLogger(__name__)

SOCKETS_OPEN = Gauge("agent_sockets_open", "WebSocket connections open on this process")
LIST_SUMMARIES = Counter(
    "agent_list_summary_reads_total",
    "Session summaries read for list sockets (one read serves every list socket "
    "of the owner in this process, and every change within the coalescing window)",
)
HANDSHAKES = Counter(
    "agent_handshakes", "Handshakes by type (start, resume) and outcome", ["type", "outcome"]
)
CLOSES = Counter(
    "agent_socket_closes", "Socket closes by close code (unknown codes as 'other')", ["code"]
)
RUNS_TAKEN_OVER = Counter(
    "agent_runs_taken_over_total",
    "Runs released at their last checkpoint because their worker stopped renewing its lease",
)
RUNS_HANDED_OVER = Counter(
    "agent_runs_handed_over_total", "Runs a stopping process gave back to the queue"
)
STEPS_REDONE = Counter(
    "agent_steps_redone_total", "Steps cut by a takeover or a hand-over and redone elsewhere"
)
PATCH_FAILURES = Counter(
    "agent_patch_failures",
    "Patches of third-party internals that did not take hold (server/patches/)",
    ["patch"],
)
# The close codes a label may name; a client may close with any code from
# 3000 to 4999, and each would otherwise become a series of its own.
KNOWN_CLOSE_CODES = frozenset(
    {value for name, value in vars(protocol).items() if name.startswith("CLOSE_")}
    # What a client or the transport reports: RFC 6455's own codes.
    | {1002, 1003, 1005, 1006, 1007, 1008, 1009}
)


def close_label(code) -> str:
    """The ``code`` label of a close: the code if it is one we know, else ``other``."""
    return str(code) if code in KNOWN_CLOSE_CODES else "other"


REPLAY_EVENTS = Histogram(
    "agent_replay_events",
    "Events a replay after a handshake covered (head - cursor)",
    buckets=(0, 1, 10, 100, 1_000, 10_000, 100_000, float("inf")),
)
REPLAY_SECONDS = Histogram(
    "agent_replay_seconds",
    "From a handshake's answer to the end of its replay",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, float("inf")),
)
APPEND_SECONDS = Histogram(
    "agent_append_seconds",
    "One append (or group commit) to the log, start to commit",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, float("inf")),
)
GROUP_COMMIT_APPENDS = Histogram(
    "agent_group_commit_appends",
    "Appends committed together by one group commit (log/group_commit.py): "
    "the count is commits, the sum appends; 1 means nothing was waiting",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 200, float("inf")),
)
GROUP_COMMIT_RETRIED = Counter(
    "agent_group_commit_retried",
    "Appends a refused group commit handed back to be committed alone",
)
RUNS_IN_FLIGHT = Gauge("agent_runs_in_flight", "Runs this process is executing now")
QUEUE_WAIT_SECONDS = Histogram(
    "agent_run_queue_wait_seconds",
    "From a run's creation to its start, for runs that waited (queued behind "
    "their session's or their user's other runs)",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, float("inf")),
)
PUBLISH_LAG_SECONDS = Histogram(
    "agent_publish_lag_seconds",
    "From an event's commit to its hand-off to the channel layer",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, float("inf")),
)


class DatabaseCollector:
    """Runs by status and gates waiting, read at each scrape."""

    def collect(self):

        runs = GaugeMetricFamily("agent_runs", "Runs by status", labels=["status"])
        try:
            counts = dict(Run.objects.values_list("status").annotate(n=Count("id")))
            for status, _ in Run.Status.choices:
                runs.add_metric([status], counts.get(status, 0))
            waiting = ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING).count()
        finally:
            close_old_connections()
        yield runs
        yield GaugeMetricFamily("agent_gates_waiting", "Approval gates waiting", value=waiting)

    def describe(self):
        return []


# The database-wide gauges: a registry of their own, served on their own
# path, so that no per-process scrape repeats them (a sum over servers
# would count each run once a server).
DATABASE = CollectorRegistry(auto_describe=False)
DATABASE.register(DatabaseCollector())


def bearer_ok(sent: str) -> bool:
    """Whether an ``Authorization`` header carries ``AGENT_METRICS_TOKEN`` (never,
    when none is set)."""
    token = settings.AGENT_METRICS_TOKEN
    return bool(token) and hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


def _allowed(request) -> bool:
    if bearer_ok(request.headers.get("Authorization", "")):
        return True
    user = getattr(request, "user", None)
    return bool(user and user.is_authenticated and user.is_staff)


def scrape(path: str) -> bytes:
    """The Prometheus text of ``/metrics`` (this process) or
    ``/metrics/database`` (the deployment's gauges, read now)."""
    return generate_latest(DATABASE if path.endswith("/database") else REGISTRY)


def metrics_view(request):
    """This process's metrics, in the Prometheus text format; 404 for whoever
    may not see them."""
    if not _allowed(request):
        raise Http404
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


def database_metrics_view(request):
    """The deployment's database-wide gauges (``DATABASE``), read now."""
    if not _allowed(request):
        raise Http404
    return HttpResponse(generate_latest(DATABASE), content_type=CONTENT_TYPE_LATEST)


async def readyz(request):
    """200 ``ready`` when the database and the channel layer work, else 503."""
    status, text = await readiness(bearer_ok(request.headers.get("Authorization", "")))
    return HttpResponse(text, status=status, content_type="text/plain")


async def readiness(detail: bool = False) -> tuple[int, str]:
    """(200, "ready") when the database and the channel layer work, else 503
    and what failed: ``readyz``'s answer, for any front that serves it.
    ``detail`` (the scraper's token): each Redis host's state too, which an
    anonymous probe is not shown."""
    problems = []
    try:
        await sync_to_async(database_works, thread_sensitive=False)()
    except Exception:
        log.exception("readyz: the database does not answer")
        problems.append("database")
    try:
        await asyncio.wait_for(_layer_works(), timeout=5)
    except Exception as exc:
        log.error("readyz: the channel layer does not answer: %r", exc)
        problems.append("channel layer")
    hosts = await _layer_hosts() if detail else []
    if problems:
        return 503, "\n".join(["not ready: " + ", ".join(problems), *hosts])
    return 200, "\n".join(["ready", *hosts])


def database_works() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        close_old_connections()


async def _layer_hosts() -> list[str]:
    """With several Redis hosts, each one's state (``channel layer host N
    (host:port): up|down``): a lost host costs only its sessions' live
    delivery, so it is reported, not made a reason to stop serving. Nothing
    with one host (the round trip above says it all)."""
    layer = get_channel_layer()
    hosts = getattr(layer, "hosts", None) or []
    if len(hosts) < 2:
        return []

    async def up(index: int) -> bool:
        try:
            return bool(await asyncio.wait_for(layer.connection(index).ping(), timeout=2))
        except Exception:  # noqa: BLE001 (down, whatever it raised)
            return False

    states = await asyncio.gather(*(up(i) for i in range(len(hosts))))
    return [
        f"channel layer host {i} ({_where(host)}): {'up' if ok else 'down'}"
        for i, (host, ok) in enumerate(zip(hosts, states, strict=True))
    ]


def _where(host: dict) -> str:
    """A host's address without its credentials."""
    address = host.get("address", "")
    if isinstance(address, str):
        return address.rsplit("@", 1)[-1].split("://", 1)[-1].split("/", 1)[0]
    return ":".join(str(part) for part in address)


async def _layer_works() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel("readyz")
    await layer.send(channel, {"type": "readyz.ping"})
    message = await layer.receive(channel)
    if message.get("type") != "readyz.ping":
        raise RuntimeError("the channel layer returned another message")
