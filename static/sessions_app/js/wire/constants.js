/**
 * Protocol constants, version 1, mirrored one-to-one from
 * sessions_app/wire/protocol.py (same names, same values). Keep the two in step:
 * tests compare them. Client-only tuning (timers, backoff) lives in the module
 * that uses it, not here.
 *
 * @module constants
 */

export const PROTOCOL_VERSION = 1;

// --- Close codes ---------------------------------------------------------------
export const CLOSE_PROTOCOL_VIOLATION = 4400;
export const CLOSE_NOT_AUTHENTICATED = 4401;
export const CLOSE_TOO_LARGE = 4413;
export const CLOSE_RATE_LIMITED = 4429;
export const CLOSE_SLOW_CONSUMER = 4408;
/** The user's rights ended (deactivated, deleted, new password): retryable, the next upgrade decides. */
export const CLOSE_RIGHTS_CHANGED = 4403;
export const CLOSE_NORMAL = 1000;
export const CLOSE_GOING_AWAY = 1001;
export const CLOSE_INTERNAL_ERROR = 1011;
export const CLOSE_SERVICE_RESTART = 1012;
export const CLOSE_TRY_AGAIN = 1013;

// --- Limits --------------------------------------------------------------------
export const MAX_FRAME_BYTES = 65536;
export const MAX_TEXT_CHARS = 32000;
export const RATE_PER_SECOND = 30;
export const RATE_BURST = 60;
export const BRANCH_RATE_PER_SECOND = 2;
export const BRANCH_RATE_BURST = 6;
export const HANDSHAKE_TIMEOUT_SECONDS = 10;
export const MAX_TAB_ID_CHARS = 64;
export const MAX_ID_CHARS = 128;
export const MAX_TITLE_CHARS = 200;
export const MAX_RUN_ID_CHARS = 40;
export const MAX_QUOTED_CHARS = 40;

// --- Frame types ---------------------------------------------------------------
// client -> server
export const START = "start";
export const RESUME = "resume";
export const ACK = "ack";
// Whether the tab is visible (a person none of whose tabs is gets told of a gate).
export const VISIBILITY = "visibility";
export const SEND = "send";
export const DECIDE = "decide";
export const CANCEL = "cancel";
export const SYNC = "sync";
// extension "branches": show another branch of the conversation
export const SWITCH = "switch";
export const PING = "ping";
// server -> client
export const START_OK = "start_ok";
export const RESUME_OK = "resume_ok";
export const RESUME_REJECTED = "resume_rejected";
export const EVENT = "event";
export const SEND_OK = "send_ok";
export const DECIDE_OK = "decide_ok";
export const CANCEL_OK = "cancel_ok";
export const SYNC_OK = "sync_ok";
export const SWITCH_OK = "switch_ok";
export const PONG = "pong";
export const PRESENCE = "presence";
export const TITLE = "title";
export const LIST_SESSIONS = "sessions";
export const LIST_SESSION = "session";
export const LIST_SESSION_GONE = "session_gone";
// extension "compact": a stretch of superseded events skipped in a replay
export const COMPACTED = "compacted";
// extension "batch": several replayed frames in one message
export const BATCH = "batch";
export const ERROR = "error";
export const SERVER_FRAMES = [
  "start_ok",
  "resume_ok",
  "resume_rejected",
  "event",
  "send_ok",
  "decide_ok",
  "cancel_ok",
  "sync_ok",
  "switch_ok",
  "pong",
  "presence",
  "title",
  "sessions",
  "session",
  "session_gone",
  "compacted",
  "batch",
  "error",
];

export const HANDSHAKE_TYPES = ["start", "resume"];

// --- Handshake features (additive to version 1) ---------------------------------
export const FEATURE_COMPACT = "compact";
export const FEATURE_BATCH = "batch";
export const FEATURE_INTERRUPT = "interrupt";
export const FEATURE_BRANCHES = "branches";
export const FEATURES = ["compact", "batch", "interrupt", "branches"];
export const MAX_FEATURES = 16;

// --- Error codes ---------------------------------------------------------------
export const E_BAD_JSON = "bad_json";
export const E_BAD_FRAME = "bad_frame";
export const E_UNKNOWN_TYPE = "unknown_type";
export const E_UNSUPPORTED_PROTOCOL = "unsupported_protocol";
export const E_NOT_FOUND = "not_found";
export const E_ALREADY_DECIDED = "already_decided";
export const E_NOT_PENDING = "not_pending";
export const E_APPROVAL_CANCELLED = "approval_cancelled";
export const E_TOO_LARGE = "too_large";
export const E_INTERNAL = "internal_error";

// --- Resume rejection reasons (checked in this order) --------------------------
export const R_UNSUPPORTED_PROTOCOL = "unsupported_protocol";
export const R_BAD_REQUEST = "bad_request";
export const R_NOT_FOUND = "not_found";
export const R_EPOCH_MISMATCH = "epoch_mismatch";
export const R_CURSOR_AHEAD = "cursor_ahead";
export const R_CURSOR_EXPIRED = "cursor_expired";

// --- Send statuses, decisions, stop reasons ------------------------------------
export const SEND_STARTED = "started";
export const SEND_QUEUED = "queued";
export const SEND_DUPLICATE = "duplicate";

export const APPROVE = "approve";
export const DENY = "deny";
export const DECISIONS = ["approve", "deny"];
// Decisions beyond yes and no: run with the person's arguments, or answer instead.
export const EDIT = "edit";
export const RESPOND = "respond";
// A question's form answered: its fields, checked by the server.
export const ANSWER = "answer";
export const ALL_DECISIONS = ["approve", "deny", "edit", "respond", "answer"];
// The longest reason a denial may give (the model is told it).
export const MAX_REASON_CHARS = 2000;
// The longest response a person may give instead of a call.
export const MAX_RESPONSE_CHARS = 32000;
// What a gate is (approval.requested's "kind").
export const GATE_APPROVAL = "approval";
export const GATE_QUESTION = "question";
export const GATE_UNKNOWN_OUTCOME = "unknown_outcome";
export const GATE_KINDS = ["approval", "question", "unknown_outcome"];
/** approval.decided's decision for a gate closed because its branch was left. */
export const GATE_CANCELLED = "cancelled";
// approval.decided's decision for a gate its deadline decided.
export const GATE_EXPIRED = "expired";

export const STOP_END_TURN = "end_turn";
export const STOP_CANCELLED = "cancelled";
export const STOP_ERROR = "error";
export const STOP_INTERRUPTED = "interrupted";
export const STOP_REQUIRES_APPROVAL = "requires_approval";
export const STOPPED_FOR_NEW_MESSAGE = "stopped for a newer message";
export const STOPPED_FOR_BRANCH = "stopped: the conversation moved to another branch";

// --- Event kinds ---------------------------------------------------------------
export const K_SESSION_CREATED = "session.created";
export const K_USER_MESSAGE = "user.message";
export const K_RUN_QUEUED = "run.queued";
export const K_RUN_STARTED = "run.started";
export const K_ASSISTANT_DELTA = "assistant.delta";
export const K_ASSISTANT_MESSAGE = "assistant.message";
export const K_TOOL_CALL = "tool.call";
export const K_APPROVAL_REQUESTED = "approval.requested";
export const K_APPROVAL_DECIDED = "approval.decided";
export const K_TOOL_RESULT = "tool.result";
export const K_RUN_FINISHED = "run.finished";
export const K_RUN_PAUSED = "run.paused";
export const K_BRANCH_SWITCHED = "branch.switched";
export const K_RUN_RESUMED = "run.resumed";
export const RESUMED_TAKEOVER = "takeover";
export const RESUMED_HANDOVER = "handover";
