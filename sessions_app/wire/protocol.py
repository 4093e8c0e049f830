"""The session protocol, version 1: frame types, close codes, limits, validation.

The normative text is ``docs/protocol.md``; this module is its one
implementation of names and rules on the server.

Everything a frame may carry is named and checked here, once. The JavaScript
client mirrors these constants in ``static/sessions_app/js/wire/constants.js``; keep the two in
step (``tests/wire/test_protocol.py`` compares them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sessions_app.wire import strict_json

PROTOCOL_VERSION = 1

# --- Close codes --------------------------------------------------------------
CLOSE_PROTOCOL_VIOLATION = 4400
CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_TOO_LARGE = 4413
CLOSE_RATE_LIMITED = 4429
CLOSE_SLOW_CONSUMER = 4408  # stopped reading; retryable: resume later
# The user was deactivated or deleted, or their password changed; retryable:
# the next upgrade's lookup decides (a cookie that no longer signs in gets 4401).
CLOSE_RIGHTS_CHANGED = 4403
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_INTERNAL_ERROR = 1011
CLOSE_SERVICE_RESTART = 1012
CLOSE_TRY_AGAIN = 1013  # retryable: come back and resume

# --- Limits -------------------------------------------------------------------
MAX_FRAME_BYTES = 64 * 1024
MAX_TEXT_CHARS = 32_000
RATE_PER_SECOND = 30
RATE_BURST = 60
# Regenerates, edits and switches of one socket (each stops runs and walks
# the tree): past this an ``error`` with ``rate_limited``, the socket lives on.
BRANCH_RATE_PER_SECOND = 2
BRANCH_RATE_BURST = 6
HANDSHAKE_TIMEOUT_SECONDS = 10.0
MAX_TAB_ID_CHARS = 64
MAX_ID_CHARS = 128
MAX_TITLE_CHARS = 200
MAX_RUN_ID_CHARS = 40  # a run id's column

# --- Frame types ----------------------------------------------------------------
# client -> server
START = "start"
RESUME = "resume"
ACK = "ack"
SEND = "send"
DECIDE = "decide"
CANCEL = "cancel"
SYNC = "sync"
SWITCH = "switch"  # extension "branches": show another branch of the conversation
PING = "ping"
# Whether the tab is visible (a person none of whose tabs is gets told of a gate).
VISIBILITY = "visibility"
# server -> client
START_OK = "start_ok"
RESUME_OK = "resume_ok"
RESUME_REJECTED = "resume_rejected"
EVENT = "event"
SEND_OK = "send_ok"
DECIDE_OK = "decide_ok"
CANCEL_OK = "cancel_ok"
SYNC_OK = "sync_ok"
SWITCH_OK = "switch_ok"
PONG = "pong"
PRESENCE = "presence"
TITLE = "title"  # the session's title changed (named after its first message, renamed)
# The list socket's frames (/ws/list/): its snapshot, one session again, one gone.
LIST_SESSIONS = "sessions"
LIST_SESSION = "session"
LIST_SESSION_GONE = "session_gone"
COMPACTED = "compacted"  # extension "compact": superseded events skipped in a replay
BATCH = "batch"  # extension "batch": several replayed frames in one message
ERROR = "error"
# Every frame the server sends: each is built in ``wire`` (``frames``), and
# nowhere else (tests/wire/test_frames.py).
SERVER_FRAMES = (
    START_OK,
    RESUME_OK,
    RESUME_REJECTED,
    EVENT,
    SEND_OK,
    DECIDE_OK,
    CANCEL_OK,
    SYNC_OK,
    SWITCH_OK,
    PONG,
    PRESENCE,
    TITLE,
    LIST_SESSIONS,
    LIST_SESSION,
    LIST_SESSION_GONE,
    COMPACTED,
    BATCH,
    ERROR,
)

HANDSHAKE_TYPES = (START, RESUME)

# --- Handshake features (additive to version 1; see docs/protocol.md) ----------
# A client lists the ones it speaks in its handshake's "features"; the server
# answers with those it will use. Unknown names are ignored.
FEATURE_COMPACT = "compact"
FEATURE_BATCH = "batch"
# "interrupt": a send may carry "interrupt": true (stop the active run and
# start this one at once); without the feature a client sees plain queueing.
FEATURE_INTERRUPT = "interrupt"
# "branches": a send may carry "regenerate" or "edit_of", "switch" moves the
# active path, and the log has branch.switched (docs/protocol.md, "Branches").
FEATURE_BRANCHES = "branches"
FEATURES = (FEATURE_COMPACT, FEATURE_BATCH, FEATURE_INTERRUPT, FEATURE_BRANCHES)
MAX_FEATURES = 16

# --- Error codes ----------------------------------------------------------------
E_BAD_JSON = "bad_json"
E_BAD_FRAME = "bad_frame"
E_UNKNOWN_TYPE = "unknown_type"
E_UNSUPPORTED_PROTOCOL = "unsupported_protocol"
E_NOT_FOUND = "not_found"
E_ALREADY_DECIDED = "already_decided"
E_NOT_PENDING = "not_pending"
E_APPROVAL_CANCELLED = "approval_cancelled"
E_TOO_LARGE = "too_large"
E_INTERNAL = "internal_error"

# --- Resume rejection reasons (checked in this order) ---------------------------
R_UNSUPPORTED_PROTOCOL = "unsupported_protocol"
R_BAD_REQUEST = "bad_request"
R_NOT_FOUND = "not_found"
R_EPOCH_MISMATCH = "epoch_mismatch"
R_CURSOR_AHEAD = "cursor_ahead"
R_CURSOR_EXPIRED = "cursor_expired"

# --- Send statuses, decisions, stop reasons --------------------------------------
SEND_STARTED = "started"
SEND_QUEUED = "queued"
SEND_DUPLICATE = "duplicate"

APPROVE = "approve"
DENY = "deny"
DECISIONS = (APPROVE, DENY)
# Decisions beyond yes and no (a gated call only, not a question): run it
# with the person's arguments, or answer it with the person's text instead.
EDIT = "edit"
RESPOND = "respond"
# A question's form answered (``wire.forms``): its fields, checked by the server.
ANSWER = "answer"
ALL_DECISIONS = (APPROVE, DENY, EDIT, RESPOND, ANSWER)
# What a gate is (approval.requested's "kind"; runtime.gates).
GATE_APPROVAL = "approval"
GATE_QUESTION = "question"
GATE_UNKNOWN_OUTCOME = "unknown_outcome"
GATE_KINDS = (GATE_APPROVAL, GATE_QUESTION, GATE_UNKNOWN_OUTCOME)
# The longest reason a denial may give (the model is told it).
MAX_REASON_CHARS = 2_000
# The longest response a person may give instead of a call.
MAX_RESPONSE_CHARS = 32_000
# approval.decided's "decision" for a gate closed undecided because its
# branch was left (never a client's decision).
GATE_CANCELLED = "cancelled"
# approval.decided's "decision" for a gate its deadline decided (never a
# client's decision either).
GATE_EXPIRED = "expired"

STOP_END_TURN = "end_turn"
STOP_CANCELLED = "cancelled"
STOP_ERROR = "error"
STOP_INTERRUPTED = "interrupted"
STOP_REQUIRES_APPROVAL = "requires_approval"
# run.finished's "message" when a "stop and send" (send with interrupt) ended it.
STOPPED_FOR_NEW_MESSAGE = "stopped for a newer message"
# ... when a switch to another branch left it.
STOPPED_FOR_BRANCH = "stopped: the conversation moved to another branch"

# --- Event kinds ------------------------------------------------------------------
K_SESSION_CREATED = "session.created"
K_USER_MESSAGE = "user.message"
K_RUN_QUEUED = "run.queued"
K_RUN_STARTED = "run.started"
K_ASSISTANT_DELTA = "assistant.delta"
K_ASSISTANT_MESSAGE = "assistant.message"
K_TOOL_CALL = "tool.call"
K_APPROVAL_REQUESTED = "approval.requested"
K_APPROVAL_DECIDED = "approval.decided"
K_TOOL_RESULT = "tool.result"
K_RUN_FINISHED = "run.finished"
K_RUN_PAUSED = "run.paused"
K_BRANCH_SWITCHED = "branch.switched"
# A run goes on in another process from its last checkpoint (docs/protocol.md,
# "Durable runs"): of the text its current message had streamed, only the
# first "keep" characters stand; what followed is redone.
K_RUN_RESUMED = "run.resumed"
# run.resumed's "reason".
RESUMED_TAKEOVER = "takeover"
RESUMED_HANDOVER = "handover"


class FrameError(Exception):
    """A frame that cannot be processed; ``code`` is one of the ``E_*`` codes."""

    def __init__(self, code: str, message: str, request_id: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


def decode(text: str | None, binary: bytes | None) -> dict[str, Any]:
    """Parse one client frame into a dict or raise ``FrameError``."""
    if text is None:
        raise FrameError(E_BAD_FRAME, "binary frames are not part of the protocol")
    try:
        frame = strict_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FrameError(E_BAD_JSON, f"frame is not valid JSON: {exc}") from None
    if not isinstance(frame, dict):
        raise FrameError(E_BAD_FRAME, "a frame must be a JSON object")
    if "type" not in frame:
        raise FrameError(E_BAD_FRAME, "a frame needs a 'type'", request_id_of(frame))
    if not isinstance(frame["type"], str):
        raise FrameError(E_BAD_FRAME, "'type' must be a string", request_id_of(frame))
    return frame


def is_unicode(value: str) -> bool:
    """Is ``value`` text that can be stored and sent? JSON can carry a lone
    surrogate (``"\\ud800"``), which no UTF-8 text (a reply, a database row)
    can hold, and NUL (``"\\u0000"``), which PostgreSQL text cannot."""
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# What an error reply may quote of a client's input, at most.
MAX_QUOTED_CHARS = 40


def quoted(value: Any) -> str:
    """``repr(value)``, cut to ``MAX_QUOTED_CHARS``: a reply never echoes more
    than a short prefix of what a client sent."""
    text = repr(value[: MAX_QUOTED_CHARS + 1] if isinstance(value, str) else value)
    if len(text) > MAX_QUOTED_CHARS:
        text = text[: MAX_QUOTED_CHARS - 1] + "\u2026"
    return text


def request_id_of(frame: dict[str, Any], *, strict: bool = False) -> Any:
    """The frame's request id if it is a short string or an integer, else None
    (what a reply may echo). With ``strict`` an id of any other kind is a
    ``FrameError`` instead (the frame itself is bad)."""
    value = frame.get("request_id")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS and is_unicode(value):
        return value
    if strict and value is not None:
        raise FrameError(
            E_BAD_FRAME, f"'request_id' must be a string of at most {MAX_ID_CHARS} characters"
        )
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def string_field(
    frame: dict[str, Any], name: str, *, required: bool = True, max_len: int = MAX_ID_CHARS
) -> str | None:
    value = frame.get(name)
    if value is None:
        if required:
            raise FrameError(E_BAD_FRAME, f"'{name}' is required", request_id_of(frame))
        return None
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise FrameError(
            E_BAD_FRAME,
            f"'{name}' must be a non-empty string of at most {max_len} characters",
            request_id_of(frame),
        )
    if not is_unicode(value):
        raise FrameError(E_BAD_FRAME, f"'{name}' is not valid Unicode", request_id_of(frame))
    return value


_MAX_CURSOR = 2**63 - 1  # what a BIGINT column holds


def _cursor(frame: dict[str, Any], name: str) -> int:
    value = frame.get(name)
    if not _is_int(value) or not 0 <= value <= _MAX_CURSOR:
        raise FrameError(
            E_BAD_FRAME, f"'{name}' must be an integer from 0 to 2**63-1", request_id_of(frame)
        )
    return value


# What a session id can look like: "s_" + URL-safe base64 (models.new_session_id)
# in the column's 40 characters. The one rule for ids that come from outside:
# no dot or slash, so an id is also a safe group name and workspace directory.
SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")


def is_session_id(value: object) -> bool:
    """Could ``value`` be a session id at all (a group name, a directory name)?"""
    return isinstance(value, str) and bool(SESSION_ID_RE.fullmatch(value))


@dataclass(frozen=True)
class Start:
    request_id: Any
    tab_id: str | None
    title: str
    features: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Resume:
    request_id: Any
    tab_id: str | None
    session_id: str
    after: int
    epoch: str | None
    features: frozenset[str] = frozenset()


class Rejection(Exception):
    """A ``resume`` that is answered with ``resume_rejected``."""

    def __init__(self, reason: str, message: str, **extra: Any):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.extra = extra


def parse_start(frame: dict[str, Any]) -> Start:
    """Validate a ``start`` frame (errors are ``FrameError``)."""
    rid = request_id_of(frame, strict=True)
    if frame.get("protocol") != PROTOCOL_VERSION or not _is_int(frame.get("protocol")):
        raise FrameError(
            E_UNSUPPORTED_PROTOCOL, f"this server speaks protocol {PROTOCOL_VERSION}", rid
        )
    tab_id = string_field(frame, "tab_id", required=False, max_len=MAX_TAB_ID_CHARS)
    title = frame.get("title")
    if title is None:
        title = ""
    if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS or not is_unicode(title):
        raise FrameError(
            E_BAD_FRAME,
            f"'title' must be a Unicode string of at most {MAX_TITLE_CHARS} characters",
            rid,
        )
    return Start(
        request_id=rid, tab_id=tab_id, title=title.strip(), features=parse_features(frame, rid)
    )


def parse_features(frame: dict[str, Any], rid: Any = None) -> frozenset[str]:
    """The handshake's ``features`` this server speaks (absent: none). Unknown
    names are ignored, so a client may offer features of a newer server."""
    offered = frame.get("features")
    if offered is None:
        return frozenset()
    if (
        not isinstance(offered, list)
        or len(offered) > MAX_FEATURES
        or not all(isinstance(name, str) for name in offered)
    ):
        raise FrameError(
            E_BAD_FRAME, f"'features' must be a list of at most {MAX_FEATURES} strings", rid
        )
    return frozenset(name for name in offered if name in FEATURES)


def parse_resume(frame: dict[str, Any]) -> Resume:
    """Validate a ``resume`` frame (errors are ``Rejection``)."""
    rid = request_id_of(frame)
    if frame.get("protocol") != PROTOCOL_VERSION or not _is_int(frame.get("protocol")):
        raise Rejection(R_UNSUPPORTED_PROTOCOL, f"this server speaks protocol {PROTOCOL_VERSION}")
    try:
        request_id_of(frame, strict=True)
        tab_id = string_field(frame, "tab_id", required=False, max_len=MAX_TAB_ID_CHARS)
        session_id = string_field(frame, "session_id")
        after = _cursor(frame, "after")
        epoch = frame.get("epoch")
        if after > 0:
            string_field(frame, "epoch")
        elif epoch is not None and (not isinstance(epoch, str) or not is_unicode(epoch)):
            raise FrameError(E_BAD_FRAME, "'epoch' must be a string")
        features = parse_features(frame)
    except FrameError as exc:
        raise Rejection(R_BAD_REQUEST, exc.message) from None
    return Resume(
        request_id=rid,
        tab_id=tab_id,
        session_id=session_id,
        after=after,
        epoch=epoch if after > 0 else None,
        features=features,
    )


@dataclass(frozen=True)
class Send:
    request_id: Any
    client_message_id: str
    text: str
    # Stop the session's active run and start this input at once ("stop and
    # send"); otherwise it queues behind the active run.
    interrupt: bool = False
    # Extension "branches": answer run ``regenerate``'s message again (no
    # text), or send ``text`` as a new version of run ``edit_of``'s message.
    regenerate: str | None = None
    edit_of: str | None = None


def parse_visibility(frame: dict[str, Any]) -> bool:
    request_id_of(frame, strict=True)
    visible = frame.get("visible")
    if not isinstance(visible, bool):
        raise FrameError(E_BAD_FRAME, "'visible' must be a boolean", frame.get("request_id"))
    return visible


def parse_ack(frame: dict[str, Any]) -> int:
    request_id_of(frame, strict=True)
    return _cursor(frame, "seq")


def parse_send(frame: dict[str, Any]) -> Send:
    request_id_of(frame, strict=True)
    return send_of(frame)


def send_of(fields: Mapping[str, Any]) -> Send:
    """A send from its fields, validated alike from a socket's frame
    (``parse_send``) and an HTTP body (the REST API, the dialects): a
    ``FrameError`` names the field."""
    rid = request_id_of(fields)
    cmid = string_field(fields, "client_message_id")
    regenerate = string_field(fields, "regenerate", required=False, max_len=MAX_RUN_ID_CHARS)
    edit_of = string_field(fields, "edit_of", required=False, max_len=MAX_RUN_ID_CHARS)
    interrupt = fields.get("interrupt", False)
    if not isinstance(interrupt, bool):
        raise FrameError(E_BAD_FRAME, "'interrupt' must be true or false", rid)
    if regenerate is not None:
        if edit_of is not None or fields.get("text") is not None:
            raise FrameError(E_BAD_FRAME, "a 'regenerate' has no 'text' and no 'edit_of'", rid)
        return Send(request_id=rid, client_message_id=cmid, text="", regenerate=regenerate)
    text = fields.get("text")
    if not isinstance(text, str) or not text.strip() or not is_unicode(text):
        raise FrameError(E_BAD_FRAME, "'text' must be a non-empty Unicode string", rid)
    if len(text) > MAX_TEXT_CHARS:
        raise FrameError(E_TOO_LARGE, f"'text' is longer than {MAX_TEXT_CHARS:,} characters", rid)
    return Send(
        request_id=rid, client_message_id=cmid, text=text, interrupt=interrupt, edit_of=edit_of
    )


def parse_switch(frame: dict[str, Any]) -> tuple[Any, str]:
    return request_id_of(frame, strict=True), switch_of(frame)


def switch_of(fields: Mapping[str, Any]) -> str:
    """The run a switch goes to, validated alike from a frame and an HTTP body."""
    return string_field(fields, "run_id", max_len=MAX_RUN_ID_CHARS)


def parse_cancel(frame: dict[str, Any]) -> tuple[Any, str]:
    rid = request_id_of(frame, strict=True)
    return rid, string_field(frame, "run_id")


def parse_sync(frame: dict[str, Any]) -> tuple[Any, int]:
    rid = request_id_of(frame, strict=True)
    return rid, _cursor(frame, "after")


def error_frame(code: str, message: str, request_id: Any = None, **extra: Any) -> dict[str, Any]:
    """An ``error`` frame."""
    frame = {"type": ERROR, "request_id": request_id, "code": code, "message": message}
    frame.update(extra)
    return frame
