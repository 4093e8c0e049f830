"""The durable state of sessions: the event log, runs, approval gates, sockets.

The log (``Event``) is the source of truth for what a client shows. ``Run`` and
``ApprovalRequest`` are the runtime's bookkeeping: everything a run needs to go
on after its process is gone lives in these rows.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

from sessions_app.server.access_log import new_connection_id


def new_session_id() -> str:
    return "s_" + secrets.token_urlsafe(16)


def new_epoch() -> str:
    return secrets.token_urlsafe(9)


def new_run_id() -> str:
    return "run_" + secrets.token_urlsafe(12)


def new_approval_id() -> str:
    return "ap_" + secrets.token_urlsafe(12)


class AgentSession(models.Model):
    """One conversation: its log head, epoch and owner."""

    class Status(models.TextChoices):
        IDLE = "idle", "idle"
        RUNNING = "running", "running"
        AWAITING_APPROVAL = "awaiting_approval", "awaiting approval"

    id = models.CharField(primary_key=True, max_length=40, default=new_session_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions"
    )
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Changes only when the log is rebuilt or restored: cursors of another
    # epoch mean nothing here.
    epoch = models.CharField(max_length=32, default=new_epoch)
    head = models.PositiveBigIntegerField(default=0)
    # The first seq still kept; events before it were purged.
    earliest = models.PositiveBigIntegerField(default=1)
    # The highest seq of a superseded delta purged by retention (0: none). A
    # client that does not compact cannot replay across such a purge.
    compacted_through = models.PositiveBigIntegerField(default=0)
    # Retention has purged the superseded deltas of every run of this session
    # that finished before this time.
    compacted_before = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.IDLE)
    # The last run of the active path (docs/protocol.md, "Branches"): a new
    # input follows it; "" before the first input.
    leaf_run_id = models.CharField(max_length=40, blank=True, default="", db_default="")
    # The id a client of another protocol names this conversation by (an AI
    # SDK chat id, an AG-UI thread id: docs/integrations.md), unique per
    # owner; "" for none. Never the session's own id: another user cannot
    # claim, probe or inherit a conversation through it.
    external_id = models.CharField(max_length=40, blank=True, default="", db_default="")

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "external_id"],
                condition=~models.Q(external_id=""),
                name="session_external_id_per_owner",
            )
        ]

    def __str__(self) -> str:
        return self.title or self.id


class Event(models.Model):
    """One entry of a session's append-only log. Written only by ``events.append_events``
    and ``events.append_batch``."""

    # No index of its own: the (session, seq) unique index serves every lookup
    # by session, and each index more is work on every append.
    session = models.ForeignKey(
        AgentSession, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    seq = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=64)
    # NULL, not "": the protocol's "run_id": null for events outside a run.
    run_id = models.CharField(max_length=40, null=True, blank=True)  # noqa: DJ001
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            # Also the index a resume reads through: (session, seq > after).
            models.UniqueConstraint(fields=["session", "seq"], name="event_session_seq_unique"),
        ]
        indexes = [
            # The skeleton of a log, everything but its deltas: what a compacted
            # replay reads to find the superseded stretches without touching
            # them. Partial, so a delta's append does not write to it.
            models.Index(
                fields=["session", "seq"],
                condition=~models.Q(kind="assistant.delta"),
                name="event_skeleton",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.kind}"


class Run(models.Model):
    """One agent turn, triggered by one user input (``client_message_id``)."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        AWAITING_APPROVAL = "awaiting_approval", "awaiting approval"
        FINISHED = "finished", "finished"

    ACTIVE = (Status.QUEUED, Status.RUNNING, Status.AWAITING_APPROVAL)

    id = models.CharField(primary_key=True, max_length=40, default=new_run_id, editable=False)
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="runs")
    client_message_id = models.CharField(max_length=128)
    text = models.TextField()
    # seq of the user.message it answers: the order runs start in. A
    # regenerated answer shares the message of the run it regenerates.
    message_seq = models.PositiveBigIntegerField()
    # The conversation tree (docs/protocol.md, "Branches"): the run whose turn
    # this one follows (None: the first turn), and the run whose user.message
    # it answers (None: its own; set for a regenerated answer).
    parent_id = models.CharField(max_length=40, null=True, blank=True)  # noqa: DJ001
    answers_id = models.CharField(max_length=40, null=True, blank=True)  # noqa: DJ001
    # The W3C traceparent of the send that started it (server.tracing): the
    # run continues that trace on whichever worker executes it ("" untraced).
    trace = models.CharField(max_length=64, blank=True, default="", db_default="")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    stop_reason = models.CharField(max_length=20, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Which worker executes the run and until when its claim holds. A running
    # run with no worker is waiting for one to pick its task up.
    worker = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Raised by every claim: the fencing token of the holder (runtime.journal
    # refuses a tool's effect from an older one, a stalled worker's).
    lease_generation = models.PositiveBigIntegerField(default=0, db_default=0)
    # The agent's own continuation state, saved when it parks at a gate.
    state = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["session", "message_seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "client_message_id"], name="run_client_message_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["session", "status"]),
            models.Index(fields=["status", "lease_expires_at"]),
            # The tree's walk down (``turns.newest_leaf_below``).
            models.Index(fields=["session", "parent_id"]),
        ]

    def __str__(self) -> str:
        return self.id


class ApprovalRequest(models.Model):
    """A durable gate: one tool call (or one question a tool asks) waiting for
    a person's decision. Its kinds and its life: ``runtime.gates``."""

    class Kind(models.TextChoices):
        # May this call run? (A gated tool call.)
        APPROVAL = "approval", "approval"
        # A question a running tool asks (an MCP elicitation).
        QUESTION = "question", "question"
        # A worker stopped while this call ran: run it again?
        UNKNOWN_OUTCOME = "unknown_outcome", "unknown outcome"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        APPROVED = "approved", "approved"
        DENIED = "denied", "denied"
        # Closed undecided: its branch was left (a regenerate, an edit, a switch).
        CANCELLED = "cancelled", "cancelled"
        # Approved with the person's own arguments (``edited_args``).
        EDITED = "edited", "edited"
        # Answered by the person instead: their ``response`` is the call's
        # result, and the tool does not run.
        ANSWERED = "answered", "answered"
        # Nobody decided before its deadline (``expires_at``): the server did.
        EXPIRED = "expired", "expired"

    id = models.CharField(primary_key=True, max_length=40, default=new_approval_id, editable=False)
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="approvals")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    tool_call_id = models.CharField(max_length=64, unique=True)
    tool = models.CharField(max_length=64)
    args = models.JSONField(default=dict)
    kind = models.CharField(
        max_length=20, choices=Kind.choices, default=Kind.APPROVAL, db_default=Kind.APPROVAL
    )
    # The gates a step opened together share the step's id (its first
    # gate's tool call id); "" for a gate alone.
    step = models.CharField(max_length=64, blank=True, default="", db_default="")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    # Through which channel the decision came (``runtime.gates.CHANNELS``).
    decided_via = models.CharField(max_length=20, blank=True, default="", db_default="")
    # A denial's reason, as the model is told it.
    reason = models.TextField(blank=True, default="", db_default="")
    # An edit's arguments, the call's own kept in ``args`` (null: not edited).
    edited_args = models.JSONField(null=True, blank=True)
    # A response instead of the call: what the model is told as its result.
    response = models.TextField(blank=True, default="", db_default="")
    # A question's answer, its form's fields (``wire.forms``; null: none given).
    answer = models.JSONField(null=True, blank=True)
    # Its deadline (null: none): the sweeper decides it ``expired`` then.
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set, in its own transaction, right before the tool runs: a continuation
    # delivered twice, or after a crash mid-call, never runs the tool again.
    executed_at = models.DateTimeField(null=True, blank=True)
    # When its owner was told it waits (``runtime.notify``: AGENT_NOTIFY), and
    # when the link told of it was opened (it opens once).
    notified_at = models.DateTimeField(null=True, blank=True)
    link_opened_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["session", "status"]),
            # The notifier's read: the pending gates nobody was told of yet.
            models.Index(
                fields=["created_at"],
                condition=models.Q(status="pending", notified_at__isnull=True),
                name="gate_notice_pending",
            ),
            # The sweeper's read: the pending gates whose deadline passed.
            models.Index(
                fields=["expires_at"],
                condition=models.Q(status="pending", expires_at__isnull=False),
                name="gate_deadline_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} ({self.status})"


class Connection(models.Model):
    """Diagnostics: one row per socket, what it asked for and how it ended."""

    id = models.CharField(
        primary_key=True, max_length=40, default=new_connection_id, editable=False
    )
    tab_id = models.CharField(max_length=64, blank=True)
    # No database constraints on this diagnostic table's references: its rows
    # are written beside the handshake, not in its path, and an FK check would
    # make those writes wait on (and deadlock with) locks on the user and
    # session rows. Django's deletes still set them to NULL.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    session = models.ForeignKey(
        AgentSession,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="connections",
        db_constraint=False,
    )
    server_id = models.CharField(max_length=100, blank=True)
    # When the socket opened: its row is written later, after its handshake's
    # answer and in a batch with others (``sockets.rows``).
    opened_at = models.DateTimeField(default=timezone.now)
    # Touched by its server while the socket is open: a row nobody touches
    # any more belonged to a server that died, and stops counting as a viewer.
    seen_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)
    close_code = models.IntegerField(null=True, blank=True)
    clean = models.BooleanField(null=True)
    first_frame_type = models.CharField(max_length=32, blank=True)
    resume_after = models.PositiveBigIntegerField(null=True, blank=True)
    last_ack = models.PositiveBigIntegerField(null=True, blank=True)
    # Whether its tab is visible, as the tab last said (``visibility``; null:
    # never said, a program or an older page: not a person looking).
    visible = models.BooleanField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]
        indexes = [
            models.Index(fields=["session", "closed_at"]),
            # runtime.notify: does a tab of this user show the app?
            models.Index(
                fields=["user"],
                condition=models.Q(closed_at__isnull=True),
                name="connection_open_by_user",
            ),
        ]

    def __str__(self) -> str:
        return self.id


def new_token_id() -> str:
    return "tok_" + secrets.token_urlsafe(9)


class ApiToken(models.Model):
    """An API key of one user, as a hash (``access.tokens``): the key itself is
    shown once, when made, and kept nowhere. A copy of the database gives no
    key that signs in."""

    id = models.CharField(primary_key=True, max_length=20, default=new_token_id, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    # The key's first characters, to tell keys apart in a list (not enough to sign in).
    prefix = models.CharField(max_length=12)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now, db_default=Now())
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"
