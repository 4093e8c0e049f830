"""Telling a person their agent waits: a gate nobody is looking at.

A gate still pending ``AGENT_NOTIFY_DELAY_SECONDS`` after it opened, while no
tab of its owner is visible (each socket's row says whether its tab is: the
``visibility`` frame), is told once to every hook of ``AGENT_NOTIFY``: dotted
paths of callables taking a ``Notice``. ``send_email`` is the built-in one
(Django's email framework: the ``EMAIL_*`` settings); a project adds its own,
a webhook or a chat message, without editing the app (docs/gates.md,
"Telling a person"). Off by default (an empty ``AGENT_NOTIFY``).

The sweeper calls ``notify_waiting_gates`` every pass. A gate is claimed
(``notified_at``, a compare-and-set) before its hooks run, so two processes
never both tell it: at most once, never twice (a process killed between the
claim and the send loses that notice). The hooks run on a thread of their
own, so a slow mail server never holds the sweeper. A gate whose owner has
a visible tab is looked at again next pass, until it is decided; one open
longer than ``WINDOW`` when first due (a deploy that turned notices on) is
never told.

Each notice carries a link (``link_for``) signed with the site's key, that
expires after ``AGENT_NOTIFY_LINK_SECONDS`` and opens once (``open_link``):
it opens the session at its gate for its owner, signed in; it never decides
anything and never signs anyone in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.core.signals import setting_changed
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.functions import Now
from django.urls import reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from sessions_app.fanout.presence import STALE_SECONDS
from sessions_app.models import ApprovalRequest, Connection

log = logging.getLogger(__name__)

BATCH = 200  # gates told at most, a pass
NOTE_CHARS = 200  # of the agent's own words, quoted in a mail
WINDOW = timedelta(days=1)
_SALT = "sessions_app.gate-link"


@dataclass(frozen=True)
class Notice:
    """One gate to tell its owner of: what waits, in which session, and the link."""

    approval_id: str
    session_id: str
    session_title: str
    username: str
    email: str
    tool: str
    kind: str
    note: str
    url: str  # the signed, single-use link that opens the session at the gate
    expires_at: datetime | None  # the gate's deadline, if it has one


@cache
def hooks() -> tuple[Callable[[Notice], None], ...]:
    """``AGENT_NOTIFY``'s callables (``checks`` names one that does not load)."""
    return tuple(import_string(path) for path in settings.AGENT_NOTIFY)


def _reset(setting: str, **_: object) -> None:
    if setting == "AGENT_NOTIFY":
        hooks.cache_clear()


setting_changed.connect(_reset)

_sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gate-notify")


def drain(timeout: float = 10.0) -> None:
    """Wait until every notice handed to the hooks so far was told."""
    _sender.submit(lambda: None).result(timeout=timeout)


def notify_waiting_gates(now: datetime | None = None) -> list[str]:
    """Tell each gate due a notice whose owner has no visible tab; the gates told."""
    if not settings.AGENT_NOTIFY:
        return []
    now = now or timezone.now()
    due = now - timedelta(seconds=settings.AGENT_NOTIFY_DELAY_SECONDS)
    # Owners who are looking are left out in the query itself: their gates
    # never fill a batch that others' are waiting behind.
    waiting = (
        ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING,
            notified_at__isnull=True,
            created_at__lte=due,
            created_at__gte=due - WINDOW,
        )
        .exclude(Exists(_looking(OuterRef("session__owner_id"))))
        .select_related("session__owner")
        .order_by("created_at")[:BATCH]
    )
    told: list[str] = []
    for gate in waiting:
        notice = notice_of(gate)  # before the claim: a claimed gate is told
        if _claim(gate, now):
            _sender.submit(_tell, notice)
            told.append(gate.id)
    return told


def _looking(user_id) -> QuerySet[Connection]:
    """The user's open, live sockets whose tab said it is visible (a socket
    whose tab never said, a program's or an older page's, is not a person
    looking). Live on the database's clock: every host's stamps agree."""
    return Connection.objects.filter(
        user_id=user_id,
        closed_at__isnull=True,
        visible=True,
        seen_at__gte=Now() - timedelta(seconds=STALE_SECONDS),
    )


def someone_looking(user_id: int) -> bool:
    """Does a tab of the user show the app now?"""
    return _looking(user_id).exists()


def _claim(gate: ApprovalRequest, now: datetime) -> bool:
    claimed = ApprovalRequest.objects.filter(
        id=gate.id, status=ApprovalRequest.Status.PENDING, notified_at__isnull=True
    ).update(notified_at=now)
    return bool(claimed)


def notice_of(gate: ApprovalRequest) -> Notice:
    owner = gate.session.owner
    return Notice(
        approval_id=gate.id,
        session_id=gate.session_id,
        session_title=gate.session.title,
        username=owner.get_username(),
        email=getattr(owner, "email", "") or "",
        tool=gate.tool,
        kind=gate.kind,
        note=(gate.args or {}).get("message", "") if gate.kind == "question" else "",
        url=link_for(gate.id),
        expires_at=gate.expires_at,
    )


def _tell(notice: Notice) -> None:
    try:
        told = hooks()
    except ImportError:  # the check names it at start; a process that ran none says so here
        log.exception("AGENT_NOTIFY cannot be loaded: gate %s not told", notice.approval_id)
        return
    for hook in told:
        try:
            hook(notice)
        except Exception:  # one channel failing is no reason to skip the next
            log.exception("AGENT_NOTIFY %r failed for gate %s", hook, notice.approval_id)


def link_for(approval_id: str) -> str:
    """The signed link that opens the session at this gate (absolute with
    ``AGENT_PUBLIC_URL``)."""
    token = signing.dumps({"g": approval_id}, salt=_SALT, compress=True)
    path = reverse("sessions_app:gate-link", args=[token])
    return settings.AGENT_PUBLIC_URL.rstrip("/") + path


class LinkRefused(Exception):
    """Why a link does not open its gate (shown to the person)."""


def open_link(token: str, user) -> ApprovalRequest:
    """The gate a link opens for ``user``, its owner, marked opened: once,
    before it expires. ``LinkRefused`` says why not."""
    try:
        payload = signing.loads(token, salt=_SALT, max_age=settings.AGENT_NOTIFY_LINK_SECONDS)
    except signing.SignatureExpired:
        raise LinkRefused("This link has expired.") from None
    except signing.BadSignature:
        raise LinkRefused("This link is not valid.") from None
    approval_id = payload.get("g") if isinstance(payload, dict) else None
    gate = ApprovalRequest.objects.filter(id=str(approval_id), session__owner=user).first()
    if gate is None:
        raise LinkRefused("This link is not for this account.")
    opened = ApprovalRequest.objects.filter(id=gate.id, link_opened_at__isnull=True).update(
        link_opened_at=timezone.now()
    )
    if not opened:
        raise LinkRefused("This link was used already: it opens once.")
    return gate


def send_email(notice: Notice) -> None:
    """The built-in channel: a plain-text mail to the owner (none without an
    address), through Django's email framework."""
    if not notice.email:
        log.info("gate %s: %s has no email address to tell", notice.approval_id, notice.username)
        return
    what = "a question" if notice.kind == "question" else f"a decision on {notice.tool}"
    title = " ".join(notice.session_title.split())[:80] or "an agent session"
    lines = [
        f"Your agent is waiting for {what} in “{title}”.",
        "",
        f"Open it: {notice.url}",
        "",
        "The link opens the session at the waiting card, once, for the next "
        f"{int(settings.AGENT_NOTIFY_LINK_SECONDS // 3600)} hours. It decides nothing by itself.",
    ]
    if notice.expires_at is not None:
        lines.insert(1, f"If nobody decides by {notice.expires_at:%Y-%m-%d %H:%M} UTC, it expires.")
    if notice.note:
        # The agent's words (a model's, which a prompt may steer): after the
        # site's own link, quoted, one line, short; never instructions.
        quoted = " ".join(notice.note.split())[:NOTE_CHARS]
        lines += ["", "The agent's question, as it wrote it:", f"> {quoted}"]
    subject = " ".join(f"Your agent is waiting: {notice.tool}".split())[:120]
    send_mail(subject, "\n".join(lines), None, [notice.email])
