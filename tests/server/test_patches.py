"""Every patch of a third-party internal takes hold, and says so loudly when
it does not (``sessions_app.server.patches``)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import subprocess
import tomllib
from pathlib import Path

import pytest

from sessions_app.delivery import transport
from sessions_app.server import patches
from sessions_app.server.patches import (
    autobahn_debug,
    channels_layers,
    daphne_buffer,
    daphne_stop,
    registry,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_patched_package_is_pinned_to_the_tested_version():
    """pyproject.toml pins each package whose internals are patched, at the
    version ``registry.PINNED`` names, and that is the version installed."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for dep in deps:
        if "==" in dep:
            name, version = dep.split("==")
            pins[name.split("[")[0].lower()] = version
    for package, version in registry.PINNED.items():
        assert pins.get(package) == version, package
        assert importlib.metadata.version(package) == version, package


def test_each_patch_takes_hold_under_daphne():
    """Applied as daphne's process applies them, every check passes."""
    import daphne.server  # noqa: F401 (what ``install`` looks for)

    patches.install(buffer_extension=transport.SEND_BUFFER_EXTENSION)
    assert daphne_buffer.check() is None
    assert daphne_stop.check() is None
    assert autobahn_debug.check() is None
    assert registry.failures == {}


def test_a_check_fails_when_its_patch_has_no_effect(monkeypatch):
    """Undo each patch and its check names what is missing."""
    from autobahn.websocket import protocol
    from daphne.server import Server
    from daphne.ws_protocol import WebSocketProtocol

    patches.install(buffer_extension=transport.SEND_BUFFER_EXTENSION)
    monkeypatch.setattr(Server, "create_application", lambda self, protocol, scope: None)
    assert "create_application" in daphne_buffer.check()
    monkeypatch.setattr(WebSocketProtocol, "serverClose", lambda self, code=None: None)
    assert "serverClose" in daphne_stop.check()
    monkeypatch.setattr(protocol, "hltype", lambda obj: "")
    assert "hltype" in autobahn_debug.check()


def test_autobahn_formats_no_debug_text_with_debug_off(monkeypatch):
    """A connection's options, logged at debug level, are not pretty-printed
    when debug is off (``repr`` instead), and the check notices if they are."""
    import daphne.server  # noqa: F401
    from autobahn.websocket import protocol

    patches.install(buffer_extension=transport.SEND_BUFFER_EXTENSION)
    assert protocol.pformat is repr
    assert protocol.WebSocketProtocol.__dict__["_connectionMade"].__code__.co_names.count("pformat")
    monkeypatch.setattr(protocol, "pformat", __import__("pprint").pformat)
    assert "pformat" in autobahn_debug.check()


def test_a_missing_member_of_channels_redis_is_reported(monkeypatch, settings):
    """The Redis layer's private members are checked; one gone refuses start-up."""
    from channels_redis.core import RedisChannelLayer

    monkeypatch.delattr(RedisChannelLayer, "_group_key")
    settings.AGENT_PATCH_FAILURES = "refuse"
    with pytest.raises(registry.PatchFailed, match="_group_key"):
        channels_layers.check_channels_redis()


def test_warn_logs_an_error_and_counts_it(monkeypatch, settings, caplog):
    """AGENT_PATCH_FAILURES=warn: an error line naming the patch and a metric,
    and the process runs on."""
    from sessions_app.server import metrics

    monkeypatch.setattr(registry, "failures", {})
    settings.AGENT_PATCH_FAILURES = "warn"
    before = metrics.PATCH_FAILURES.labels("send_buffer")._value.get()
    with caplog.at_level(logging.ERROR, logger="sessions_app.server.patches"):
        registry.report("send_buffer", "no buffer to read")
    assert "send_buffer patch did not take hold" in caplog.text and "WITHOUT" in caplog.text
    assert metrics.PATCH_FAILURES.labels("send_buffer")._value.get() == before + 1


def test_a_server_refuses_to_start_when_a_patch_does_not_hold(tmp_path):
    """A daphne whose patch cannot take hold exits with a message naming it
    (here the probe's Twisted member, removed before the app loads)."""
    import os
    import sys

    from tests.harness import server_env

    script = (
        "from twisted.internet import abstract\n"
        "del abstract.FileDescriptor.offset\n"
        "import sys\n"
        "sys.argv = ['daphne', '-b', '127.0.0.1', '-p', '0', 'agentsite.asgi:application']\n"
        "from daphne.cli import CommandLineInterface\n"
        "CommandLineInterface.entrypoint()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=server_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "the send_buffer patch did not take hold" in done.stderr
    assert "FileDescriptor has no offset" in done.stderr
    assert os.path.exists(ROOT / "manage.py")


def test_the_probe_reads_a_tls_transport(tmp_path, cookie, user, transactional_db):
    """Under daphne's own TLS endpoint a client that stops reading is closed
    4408, as over plain TCP: the probe reads through TLSMemoryBIOProtocol to
    the socket's buffer (the review found it returned 0 there)."""
    from sessions_app.models import Connection
    from tests.harness import Daphne
    from tests.raw_http import client_frame, raw_socket_that_never_reads, self_signed_certificate
    from tests.sockets.test_session_limits import _big_log
    from tests.support.waiting import wait_until

    key, cert = self_signed_certificate(tmp_path)
    daphne = Daphne(
        tmp_path,
        tls=(key, cert),
        AGENT_SEND_BUFFER_BYTES="262144",
        AGENT_SLOW_CONSUMER_SECONDS="1",
    ).start()
    try:
        s = _big_log(user, 8_000, 1000)
        sock = raw_socket_that_never_reads(daphne.port, cookie, tls=True)
        resume = {"type": "resume", "protocol": 1, "session_id": s.id, "after": 0}
        sock.sendall(client_frame(json.dumps(resume)))

        def closed():
            return Connection.objects.filter(session_id=s.id, close_code=4408).exists()

        asyncio.run(wait_until(closed, timeout=60))
        sock.close()
    finally:
        daphne.stop()


def test_an_unknown_transport_is_reported_once_and_never_refused(monkeypatch, settings, caplog):
    """A socket whose transport the probe cannot read (found while serving,
    when refusing is no longer possible) is logged as an error and counted
    once, even with AGENT_PATCH_FAILURES=refuse; the socket runs unprobed."""
    monkeypatch.setattr(registry, "failures", {})
    settings.AGENT_PATCH_FAILURES = "refuse"
    transport.plug(gone=daphne_buffer.PEER_GONE, unreadable=daphne_buffer.unreadable)
    scope = {"extensions": {transport.SEND_BUFFER_EXTENSION: lambda: -1}}
    with caplog.at_level(logging.ERROR, logger="sessions_app.server.patches"):
        assert transport.send_buffer_probe(scope) is None
        assert transport.send_buffer_probe(scope) is None
    assert caplog.text.count("send_buffer patch did not take hold") == 1


class _FileDescriptor:
    def __init__(self, buffered: int, disconnected=False):
        self.dataBuffer = b"y" * buffered
        self.offset = 0
        self._tempDataLen = 0
        self.disconnected = disconnected


class _Protocol:
    def __init__(self, transport):
        self.transport = transport


def test_the_probe_counts_tls_cleartext_and_ciphertext():
    """Under daphne's TLS the probe counts the wrapper's cleartext waiting
    for its handshake plus the socket's ciphertext (the wrapper passes
    ``dataBuffer`` through, so it is recognised by its class)."""
    import weakref

    from twisted.protocols.tls import TLSMemoryBIOProtocol

    tls = object.__new__(TLSMemoryBIOProtocol)
    tls._appSendBuffer = [b"x" * 5000]
    tls.transport = _FileDescriptor(100)
    protocol = _Protocol(tls)
    assert daphne_buffer.transport_buffered(weakref.ref(protocol)) == 5100


def test_the_probe_reads_zero_once_the_connection_is_lost():
    """Twisted keeps a lost connection's unsent bytes; the probe does not
    count them, so nothing waits for a reader that is gone."""
    import weakref

    alive = _Protocol(_FileDescriptor(4000))
    lost = _Protocol(_FileDescriptor(4000, disconnected=True))
    assert daphne_buffer.transport_buffered(weakref.ref(alive)) == 4000
    assert daphne_buffer.transport_buffered(weakref.ref(lost)) == 0


def test_checks_without_sources_assume_and_say_so(caplog):
    """Installed as bytecode only, a source check cannot look: it assumes
    the member and logs that it did, instead of failing to start."""
    with caplog.at_level(logging.WARNING, logger="sessions_app.server.patches"):
        assert registry.source_of(len, "assumed") == "assumed"
    assert "assumed, not checked" in caplog.text


def test_delivery_catches_what_the_server_plugs_in_as_a_client_gone():
    """``delivery.transport.GONE`` is its own ``PeerGone`` and what the
    server's adapter says its send raises (daphne: autobahn's
    ``Disconnected``), read at each ``except``: the delivery path catches
    it without importing the patches."""
    from autobahn.exception import Disconnected

    transport.plug(gone=())
    assert (transport.PeerGone,) == transport.GONE
    transport.plug(gone=daphne_buffer.PEER_GONE, unreadable=daphne_buffer.unreadable)
    try:
        raise Disconnected("Attempt to send on a closed protocol")
    except transport.GONE as gone:
        assert isinstance(gone, Disconnected)


def test_the_graceful_stop_waits_for_settled_sockets_then_flushes():
    """``GracefulStop.drain``: the runs handed back first, then the sockets'
    closes waited for (none here), then the rows flushed, in that order."""
    said = []
    stop = daphne_stop.GracefulStop()
    stop.on_stop = lambda: said.append("runs handed back")

    async def flush():
        said.append("rows flushed")

    stop.flush = flush
    asyncio.run(stop.drain([]))
    assert said == ["runs handed back", "rows flushed"]
