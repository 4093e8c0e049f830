"""Exceptions the session server and the runtime raise to each other.

The domain errors a client can cause (``SessionError`` and its subclasses)
carry their protocol error code, a message and an HTTP status, as DRF's
``APIException`` does: ``sockets.commands.error_frame_for`` turns one into an
``error`` frame for the socket, ``api.exception_handler`` into a response.
"""

from __future__ import annotations

from typing import Any


class SessionGone(BaseException):
    """The session was deleted while something was appending to it.

    A stop signal, like ``RunAborted``: a ``BaseException``, as
    ``asyncio.CancelledError`` is, so an agent's ``except Exception`` around
    its streaming loop cannot swallow it."""


class RunAborted(BaseException):
    """The run was cancelled, finished or taken over: its worker must stop
    (a ``BaseException``: see ``SessionGone``)."""


class SessionError(Exception):
    """A request that cannot be done; ``code`` is a protocol error code."""

    code = "bad_frame"
    status = 400
    message = "the request cannot be done"

    def __init__(self, message: str | None = None, **extra: Any):
        super().__init__(message or self.message)
        if message:
            self.message = message
        self.extra = extra

    def detail(self) -> dict[str, Any]:
        """The error's fields as the socket and the API report them."""
        return {"code": self.code, "message": self.message, **self.extra}


class NotFound(SessionError):
    """A session, run or approval that does not exist for this user and session."""

    code = "not_found"
    status = 404
    message = "not found"


class AlreadyDecided(SessionError):
    """An approval whose first decision already stands."""

    code = "already_decided"
    status = 409

    def __init__(self, decision: str, decided_by: str):
        super().__init__(
            f"this approval was already decided: {decision} by {decided_by}",
            decision=decision,
            decided_by=decided_by,
        )
        self.decision = decision
        self.decided_by = decided_by


class NotPending(SessionError):
    """A run that has already finished."""

    code = "not_pending"
    status = 409
    message = "this run has already finished"


class TooManyRuns(SessionError):
    """The user has ``AGENT_USER_MAX_QUEUED_RUNS`` runs waiting to start."""

    code = "too_many_runs"
    status = 429
    message = "too many of your runs are waiting to start: wait for one to finish"


class ApprovalPending(SessionError):
    """A new input from a client that streams its answer while a gate waits
    (the dialects: docs/integrations.md): its run would queue behind a gate
    that client cannot answer meanwhile."""

    code = "approval_pending"
    status = 409
    message = "a tool call waits for your approval: answer it first (or stop the run)"


class SessionFull(SessionError):
    """The session has ``AGENT_SESSION_MAX_RUNS`` turns: a new one goes in a new session."""

    code = "session_full"
    status = 409
    message = "this session has reached its limit of turns: start a new session"


class BranchRateLimited(SessionError):
    """A socket sent regenerates, edits and switches faster than
    ``protocol.BRANCH_RATE_PER_SECOND``: each one stops runs and reads the
    tree, so they have a rate of their own. Retry after a moment."""

    code = "rate_limited"
    status = 429
    message = "too many regenerates, edits or switches: wait a moment and retry"


class ApprovalCancelled(SessionError):
    """A gate closed undecided because its branch was left (a regenerate, an
    edit or a switch): no decision can open it again, and its tool never runs."""

    code = "approval_cancelled"
    status = 409

    def __init__(self, cancelled_by: str = ""):
        super().__init__(
            "this approval was cancelled: the conversation moved to another branch",
            cancelled_by=cancelled_by,
        )
