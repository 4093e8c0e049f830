"""Exceptions the session server and the runtime raise to each other."""


class SessionGone(Exception):
    """The session was deleted while something was appending to it."""


class RunAborted(Exception):
    """The run was cancelled, finished or taken over: its worker must stop."""


class NotFound(Exception):
    """A session, run or approval that does not exist for this user and session."""


class AlreadyDecided(Exception):
    """An approval whose first decision already stands."""

    def __init__(self, decision: str, decided_by: str):
        super().__init__(f"already {decision} by {decided_by}")
        self.decision = decision
        self.decided_by = decided_by


class NotPending(Exception):
    """A run that has already finished."""
