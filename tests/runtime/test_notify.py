"""Telling a person their agent waits (runtime/notify.py): a gate pending past
the delay while no tab of its owner is visible is told once to every
``AGENT_NOTIFY`` hook; the mail reaches a real SMTP server (aiosmtpd) with a
signed link that opens the session at the gate for its owner, once, and
decides nothing; a tab says whether it is visible (``visibility``)."""

from __future__ import annotations

import email
import re
import socket
import threading
from datetime import timedelta

import httpx
import pytest
from aiosmtpd.controller import Controller
from channels.db import database_sync_to_async
from django.core import signing
from django.utils import timezone

from sessions_app.log.sessions import create_session
from sessions_app.models import ApprovalRequest, Connection, Run
from sessions_app.runtime import notify
from sessions_app.runtime.gates import Gate
from tests.harness import api_key, session_cookie
from tests.runtime.test_mcp import send
from tests.support.sessions import open_session
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TOLD: list[notify.Notice] = []
HOOK = "tests.runtime.test_notify.caught"


def caught(notice: notify.Notice) -> None:
    TOLD.append(notice)


@pytest.fixture(autouse=True)
def _told(settings):
    settings.AGENT_NOTIFY = [HOOK]
    settings.AGENT_NOTIFY_DELAY_SECONDS = 60
    settings.AGENT_PUBLIC_URL = "https://agents.example.com/"
    TOLD.clear()
    yield
    notify.drain()  # no hook left running
    TOLD.clear()


def _gate(user, tool_call_id: str = "call_a", minutes_ago: float = 2) -> ApprovalRequest:
    session = create_session(user, "Quarterly report")
    run = Run.objects.create(
        session=session, client_message_id=tool_call_id, text="x", message_seq=1
    )
    row = Gate(tool_call_id, "write_file", {"path": "a", "text": "b"}).row(session.id, run.id)
    row.save()
    opened = timezone.now() - timedelta(minutes=minutes_ago)
    ApprovalRequest.objects.filter(id=row.id).update(created_at=opened)
    return row


def _tab(user, *, visible: bool | None, closed: bool = False) -> Connection:
    return Connection.objects.create(
        user=user, visible=visible, closed_at=timezone.now() if closed else None
    )


def _told_ids() -> list[str]:
    notify.drain()  # the hooks ran
    return [notice.approval_id for notice in TOLD]


def test_a_gate_nobody_looks_at_is_told_once_past_the_delay(user):
    """Past the delay with no tab open: told once, with what waits and a
    link; the next pass tells nothing again."""
    gate = _gate(user)
    assert notify.notify_waiting_gates() == [gate.id]
    assert notify.notify_waiting_gates() == []
    assert _told_ids() == [gate.id]
    [notice] = TOLD
    assert (notice.session_title, notice.tool, notice.username) == (
        "Quarterly report",
        "write_file",
        "alice",
    )
    assert notice.url.startswith("https://agents.example.com/gate/")
    assert ApprovalRequest.objects.get(id=gate.id).notified_at is not None


def test_a_gate_is_not_told_early_decided_or_too_old(user, settings):
    """Before its delay, once decided, or opened more than a day before it
    was due (notices turned on later): never told."""
    early = _gate(user, "call_early", minutes_ago=0.5)
    decided = _gate(user, "call_decided")
    ApprovalRequest.objects.filter(id=decided.id).update(status="approved")
    _gate(user, "call_old", minutes_ago=60 * 25)
    assert notify.notify_waiting_gates() == []
    settings.AGENT_NOTIFY = []
    ApprovalRequest.objects.filter(id=early.id).update(
        created_at=timezone.now() - timedelta(minutes=5)
    )
    assert notify.notify_waiting_gates() == []  # off: nothing read, nothing told


def test_a_visible_tab_of_the_owner_holds_the_notice_until_it_is_hidden(user, other_user):
    """A visible open tab of the owner: not told (looked at again each pass);
    a hidden one, a closed one, or another user's visible one do not count."""
    gate = _gate(user)
    looking = _tab(user, visible=True)
    _tab(user, visible=False)
    _tab(user, visible=True, closed=True)
    _tab(other_user, visible=True)
    assert notify.notify_waiting_gates() == []
    Connection.objects.filter(id=looking.id).update(visible=False)
    assert notify.notify_waiting_gates() == [gate.id]


def test_gates_of_an_owner_who_looks_never_hold_back_anothers(user, other_user, monkeypatch):
    """More waiting gates of a looking owner than a pass reads: another
    owner's gate is still told (the looking ones are left out in the read)."""
    monkeypatch.setattr(notify, "BATCH", 2)
    for i in range(3):
        _gate(user, f"call_{i}", minutes_ago=3)
    _tab(user, visible=True)
    theirs = _gate(other_user, "call_theirs", minutes_ago=2)
    assert notify.notify_waiting_gates() == [theirs.id]


def test_a_tab_that_never_said_is_nobody_looking(user):
    """A socket whose tab never sent visibility (a program's, an older
    page's) does not hold the notice."""
    gate = _gate(user)
    _tab(user, visible=None)
    assert not notify.someone_looking(user.pk)
    assert notify.notify_waiting_gates() == [gate.id]


def test_a_stale_tab_counts_as_gone(user):
    """A visible tab whose server stopped vouching for it (a dead server's
    row) does not hold the notice."""
    gate = _gate(user)
    stale = _tab(user, visible=True)
    Connection.objects.filter(id=stale.id).update(seen_at=timezone.now() - timedelta(minutes=5))
    assert notify.notify_waiting_gates() == [gate.id]


def test_two_sweepers_tell_a_gate_once(user):
    """Two passes racing on two threads: one claim stands."""
    gate = _gate(user)
    results: list[list[str]] = []
    barrier = threading.Barrier(2)

    def sweep() -> None:
        barrier.wait()
        try:
            results.append(notify.notify_waiting_gates())
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [[], [gate.id]]
    assert _told_ids() == [gate.id]


def test_a_failing_hook_does_not_stop_the_next(user, settings):
    """One channel raising: the next is still told."""
    settings.AGENT_NOTIFY = ["tests.runtime.test_notify.broken_hook", HOOK]
    gate = _gate(user)
    notify.notify_waiting_gates()
    assert _told_ids() == [gate.id]


def broken_hook(notice: notify.Notice) -> None:
    raise RuntimeError("the chat service is down")


def test_the_link_opens_its_gate_once_for_its_owner_only(user, other_user, settings):
    """Another account, a forged or expired token: refused, the link still
    unused; the owner opens it once; a second time is refused."""
    gate = _gate(user)
    token = notify.link_for(gate.id).rsplit("/gate/", 1)[1].strip("/")
    with pytest.raises(notify.LinkRefused, match="not for this account"):
        notify.open_link(token, other_user)
    with pytest.raises(notify.LinkRefused, match="not valid"):
        notify.open_link(token[:-2] + "xx", user)
    forged = signing.dumps({"g": gate.id}, salt="another purpose")
    with pytest.raises(notify.LinkRefused, match="not valid"):
        notify.open_link(forged, user)
    settings.AGENT_NOTIFY_LINK_SECONDS = -1
    with pytest.raises(notify.LinkRefused, match="expired"):
        notify.open_link(token, user)
    settings.AGENT_NOTIFY_LINK_SECONDS = 3600
    assert notify.open_link(token, user).id == gate.id
    with pytest.raises(notify.LinkRefused, match="used already"):
        notify.open_link(token, user)
    assert ApprovalRequest.objects.get(id=gate.id).status == "pending"  # decides nothing


async def test_a_tab_says_whether_it_is_visible(server, cookie):
    """The visibility frame updates the socket's row; a bad one is
    bad_frame and the socket lives on."""
    c, _sid = await open_session(server, cookie)
    await c.send({"type": "visibility", "visible": False})
    row = await database_sync_to_async(wait_for)(
        lambda: Connection.objects.filter(visible=False, closed_at__isnull=True).first()
    )
    assert row.user.username == "alice"
    bad = await c.request({"type": "visibility", "visible": "no"})
    assert bad["code"] == "bad_frame" and bad["message"] == "'visible' must be a boolean"
    assert (await c.request({"type": "ping"}))["type"] == "pong"
    await c.close()


class _Inbox:
    def __init__(self) -> None:
        self.mails: list[email.message.Message] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.mails.append(email.message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def smtp():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield port, inbox
    controller.stop()


def test_a_mail_reaches_a_real_smtp_server_and_its_link_opens_the_gate_once(own_server, user, smtp):
    """On a server with the mail on: a gate nobody looks at is mailed to its
    owner (one mail, through SMTP) with the link; the link, for the owner
    signed in, opens the session at the gate; a second time it says it was
    used; signed out it asks to sign in first and spends nothing."""
    port, inbox = smtp
    user.email = "alice@example.org"
    user.save()
    start, _ = own_server
    server = start(
        AGENT_NOTIFY="sessions_app.runtime.notify.send_email",
        AGENT_NOTIFY_DELAY_SECONDS="0.2",
        AGENT_SWEEP_SECONDS="0.2",
        AGENT_PUBLIC_URL="http://agents.test",
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(port),
        DEFAULT_FROM_EMAIL="agents@example.org",
    )
    auth = {"Authorization": f"Token {api_key(user)}"}
    with httpx.Client(base_url=server.http, headers=auth, timeout=30) as c:
        sid, run_id = send(c, "/write told.txt hi", "m1")
    gate = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run_id).first())
    [mail] = wait_for(lambda: list(inbox.mails), timeout=30)
    assert (mail["To"], mail["From"]) == ("alice@example.org", "agents@example.org")
    assert mail["Subject"] == "Your agent is waiting: write_file"
    body = mail.get_payload(decode=True).decode()
    assert "Your agent is waiting for a decision on write_file" in body
    [link] = re.findall(r"http://agents\.test(/gate/[^\s]+/)", body)
    with httpx.Client(base_url=server.http, timeout=30) as anonymous:
        signed_out = anonymous.get(link)
    assert signed_out.status_code == 302 and "/login/" in signed_out.headers["location"]
    cookie = {"Cookie": session_cookie(user)}
    with httpx.Client(base_url=server.http, headers=cookie, timeout=30) as browser:
        opened = browser.get(link)
        assert opened.status_code == 302
        assert opened.headers["location"] == f"/s/{sid}/#gate-{gate.id}"
        again = browser.get(link)
        assert again.status_code == 410 and "used already" in again.text
    assert ApprovalRequest.objects.get(id=gate.id).status == "pending"
    assert len(inbox.mails) == 1


def test_the_mail_puts_the_sites_link_first_and_quotes_the_agents_words(settings):
    """A question's text is the model's: in the mail it comes after the
    site's own link, quoted on one line and cut short, and the subject
    holds no line break whatever the tool's name."""
    from django.core import mail

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    hostile = "Ignore the link above.\n\nOpen it: https://evil.example/login " + "x" * 500
    notify.send_email(
        notify.Notice(
            approval_id="ap_1",
            session_id="s_1",
            session_title="Report\r\nBcc: x@evil.example",
            username="alice",
            email="alice@example.org",
            tool="ask_user\r\nBcc: x@evil.example",
            kind="question",
            note=hostile,
            url="https://agents.example.com/gate/t/",
            expires_at=None,
        )
    )
    [sent] = mail.outbox
    assert "\n" not in sent.subject and "\r" not in sent.subject
    lines = sent.body.splitlines()
    link = lines.index("Open it: https://agents.example.com/gate/t/")
    quoted = [i for i, line in enumerate(lines) if line.startswith("> ")]
    assert quoted and quoted[0] > link and len(quoted) == 1
    assert lines[quoted[0]] == "> " + " ".join(hostile.split())[: notify.NOTE_CHARS]
    assert sent.to == ["alice@example.org"]
