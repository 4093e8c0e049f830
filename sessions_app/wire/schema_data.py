"""What the frames carry, past their envelope (``schema.py`` holds the
envelopes): each event kind's ``data``, the list socket's frames and the SSE
stream's own events, as JSON Schema (2020-12).

Each schema follows what the code writes (its builder is named beside it).
Extra keys stay allowed (no ``additionalProperties``): a newer server may add
fields, and a client ignores those it does not know.
"""

from __future__ import annotations

from typing import Any

from sessions_app.wire import protocol as p

ID = {"type": "string", "minLength": 1, "maxLength": p.MAX_ID_CHARS}
RUN_ID = {"type": "string", "minLength": 1, "maxLength": p.MAX_RUN_ID_CHARS}
SEQ = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
REQUEST_ID = {
    "description": "echoed in the reply; a string of at most 128 characters or an integer",
    "oneOf": [{"type": "string", "maxLength": p.MAX_ID_CHARS}, {"type": "integer"}],
}
REPLY_ID = {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}
# A run's parent on the tree: null for a turn at the root.
PARENT_RUN_ID = {"type": ["string", "null"], "maxLength": p.MAX_RUN_ID_CHARS}
STRING = {"type": "string"}

# ``runtime.registry.DISPLAY_AS`` (wire does not import runtime).
DISPLAY_AS = ("code", "block", "command")
DISPLAY = {
    "description": "how a card shows the arguments (the tool's ``display``); absent: as JSON",
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "arg": STRING,
            "label": STRING,
            "as": {"enum": list(DISPLAY_AS), "description": "absent: code"},
        },
        "required": ["arg"],
    },
}
TOOL_CALL_ID = {
    "type": "string",
    "minLength": 1,
    "description": "call_… (runtime.context.new_call_id), or ask_… for a question",
}
NOTE = {
    "type": "string",
    "description": "why the gate is asked when it is not the agent's own request",
}
# The fields of a tool call, shared by tool.call and approval.requested
# (runtime.runs.park, runtime.context.Context._auto_step, runtime.questions.Asker._open).
CALL_REQUIRED = {"tool_call_id": TOOL_CALL_ID, "tool": STRING, "args": {"type": "object"}}
CALL_OPTIONAL = {"display": DISPLAY, "note": NOTE}
# A question's arguments (``tool_call_id`` ``ask_…``): what it asks, its form
# (wire.forms), and what approving answers (absent when its defaults do not).
QUESTION_ARGS = {
    "type": "object",
    "properties": {"message": STRING, "schema": {"type": "object"}, "answer": {"type": "object"}},
    "required": ["message"],
}


def frame_of(
    kind: str, required: dict[str, Any], optional: dict[str, Any] | None = None, **more: Any
) -> dict[str, Any]:
    """A frame of type ``kind``: its ``required`` and ``optional`` fields."""
    props = {"type": {"const": kind}, **required, **(optional or {})}
    return {"type": "object", "properties": props, "required": ["type", *required], **more}


def _data(
    required: dict[str, Any], optional: dict[str, Any] | None = None, **more: Any
) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": list(required),
        **more,
    }


def _call(optional: dict[str, Any] | None = None, **extra_required: Any) -> dict[str, Any]:
    return _data(
        {**extra_required, **CALL_REQUIRED},
        {**CALL_OPTIONAL, **(optional or {})},
        **{
            "if": {"properties": {"tool_call_id": {"pattern": "^ask_"}}},
            "then": {"properties": {"args": QUESTION_ARGS}, "required": ["note"]},
        },
    )


def event_data_schemas() -> dict[str, dict[str, Any]]:
    """Each event kind's ``data``, by kind."""
    return {**_turn_data(), **_answer_data(), **_run_data()}


def _turn_data() -> dict[str, dict[str, Any]]:
    """A session's and a turn's opening: the session, the message, the run."""
    started = _data(
        {"client_message_id": ID},
        # A regenerated answer's run (runtime.turns._branch, ``follow``).
        {"regenerates": RUN_ID, "parent_run_id": PARENT_RUN_ID},
        dependentRequired={"regenerates": ["parent_run_id"]},
    )
    return {
        # log.sessions.create_session (cut to 200 characters; "" unnamed).
        p.K_SESSION_CREATED: _data({"title": {"type": "string", "maxLength": p.MAX_TITLE_CHARS}}),
        # runtime.turns._submit; an edit (turns._branch) adds edits and parent_run_id.
        p.K_USER_MESSAGE: _data(
            {
                "client_message_id": ID,
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": p.MAX_TEXT_CHARS,
                    "pattern": r"\S",
                },
            },
            {"edits": RUN_ID, "parent_run_id": PARENT_RUN_ID},
            dependentRequired={"edits": ["parent_run_id"]},
        ),
        # runtime.turns.open_turn (both) and runtime.runs.start_next_run (run.started).
        p.K_RUN_QUEUED: started,
        p.K_RUN_STARTED: started,
    }


def _answer_data() -> dict[str, dict[str, Any]]:
    """What a run says: its text, its tool calls, their gates and results."""
    return {
        # runtime.context.Context.delta: may end with the cut marker.
        p.K_ASSISTANT_DELTA: _data({"text": STRING}),
        # Context.message, Context._auto_step and runs.park (the text streamed
        # before a call): may be empty.
        p.K_ASSISTANT_MESSAGE: _data({"text": STRING}),
        p.K_TOOL_CALL: _call(),
        # kind (runtime.gates): absent on gates logged before kinds; step:
        # the id the gates one step opened together share.
        p.K_APPROVAL_REQUESTED: _call(
            {
                "kind": {"enum": list(p.GATE_KINDS)},
                "step": TOOL_CALL_ID,
                # When the server decides it expired if nobody has (UTC, ms).
                "expires_at": {"type": "string", "format": "date-time"},
            },
            approval_id=ID,
        ),
        # runtime.runs.record_decision, runtime.questions.close_open. decided_by:
        # a username, "" (a branch change without one), or why a question
        # closed undecided ("unanswered", "stopped", "the call ended", …).
        p.K_APPROVAL_DECIDED: _data(
            {
                "approval_id": ID,
                "decision": {"enum": [*p.ALL_DECISIONS, p.GATE_CANCELLED, p.GATE_EXPIRED]},
                "decided_by": STRING,
            },
            # reason: a denial's; step: decided with its whole step at once;
            # args: an edit's (what runs); response: what the model is told;
            # answer: a question's form answered, its fields.
            {
                "reason": STRING,
                "step": TOOL_CALL_ID,
                "args": {"type": "object"},
                "response": STRING,
                "answer": {"type": "object"},
            },
        ),
        # runtime.toolcalls, runs.cancel_locked, durable._unknown_result,
        # questions.close_open.
        p.K_TOOL_RESULT: _data(
            {"tool_call_id": TOOL_CALL_ID, "ok": {"type": "boolean"}, "output": STRING}
        ),
    }


def _run_data() -> dict[str, dict[str, Any]]:
    """A run's life: finished, paused at a gate, resumed; a branch switched."""
    return {
        # runtime.runs.finish_run: "message" always with error, with cancelled
        # when one was given (stop and send, a branch change), never empty.
        p.K_RUN_FINISHED: _data(
            {
                "stop_reason": {
                    "enum": [p.STOP_END_TURN, p.STOP_CANCELLED, p.STOP_ERROR, p.STOP_INTERRUPTED],
                    "description": "interrupted: only in logs of older servers",
                }
            },
            {"message": {"type": "string", "minLength": 1}},
            **{
                "if": {"properties": {"stop_reason": {"const": p.STOP_ERROR}}},
                "then": {"required": ["message"]},
            },
        ),
        # runtime.runs.park, runtime.questions.Asker._open.
        p.K_RUN_PAUSED: _data(
            {"stop_reason": {"const": p.STOP_REQUIRES_APPROVAL}, "approval_id": ID}
        ),
        # runtime.durable.release.
        p.K_RUN_RESUMED: _data(
            {
                "reason": {"enum": [p.RESUMED_TAKEOVER, p.RESUMED_HANDOVER]},
                "keep": {"type": "integer", "minimum": 0},
            }
        ),
        # runtime.turns.switch.
        p.K_BRANCH_SWITCHED: _data({"leaf_run_id": RUN_ID}),
    }


# The kinds logged outside any run (the event's top-level run_id is null).
SESSION_KINDS = (p.K_SESSION_CREATED, p.K_BRANCH_SWITCHED)


# --- the list socket (/ws/list/, sockets.listing) ------------------------------------

STATUSES = ("idle", "running", "awaiting_approval")  # AgentSession.Status
STATUS_LABELS = ("idle", "running", "awaiting approval")
MAX_LISTED = 200  # log.sessions.MAX_LISTED


def session_summary() -> dict[str, Any]:
    """One session as the list shows it (log.sessions.summaries)."""
    count = {"type": "integer", "minimum": 0}
    return _data(
        {
            "id": {"type": "string", "minLength": 1, "maxLength": 40},
            "title": {"type": "string", "maxLength": p.MAX_TITLE_CHARS},
            "status": {"enum": list(STATUSES)},
            "status_label": {"enum": list(STATUS_LABELS)},
            "updated_at": {
                "type": "string",
                "description": "datetime.isoformat(): microseconds and +00:00, not an event's ts",
            },
            "pending_approvals": count,
            "active_runs": count,
        }
    )


def list_frames() -> dict[str, dict[str, dict[str, Any]]]:
    """The list socket's frames: what a client may send (``ping`` only; any
    other type is answered ``error`` ``unknown_type``) and what the server sends."""
    return {
        "client": {p.PING: frame_of(p.PING, {}, {"request_id": REQUEST_ID})},
        "server": {
            p.LIST_SESSIONS: frame_of(
                p.LIST_SESSIONS,
                {"sessions": {"type": "array", "items": session_summary(), "maxItems": MAX_LISTED}},
                {"truncated": {"const": True, "description": "present only when more exist"}},
            ),
            p.LIST_SESSION: frame_of(p.LIST_SESSION, {"session": session_summary()}),
            p.LIST_SESSION_GONE: frame_of(p.LIST_SESSION_GONE, {"session_id": STRING}),
            p.PONG: frame_of(p.PONG, {"request_id": REPLY_ID}),
            p.ERROR: frame_of(
                p.ERROR,
                {
                    "request_id": REPLY_ID,
                    "code": {"enum": [p.E_BAD_JSON, p.E_BAD_FRAME, p.E_UNKNOWN_TYPE]},
                    "message": STRING,
                },
            ),
        },
    }


# --- the SSE stream (GET /api/sessions/<id>/stream/, web.stream, wire.sse) -----------


def sse_events() -> dict[str, dict[str, Any]]:
    """The ``data`` of the stream's events other than the logged ones (each
    of those is ``event: <kind>``, ``id: <seq>``, the ``event`` frame)."""
    return {
        # wire.frames.stream_opening: every response's first event, no id, retry 1000.
        "stream": {
            "description": "first event of every response; no id; retry: 1000",
            **_data({"session_id": STRING, "epoch": STRING, "head": SEQ}),
        },
        # wire.frames.compacted_frame (?compact=1); id: its last seq.
        p.COMPACTED: {
            "description": "a superseded stretch skipped (?compact=1); id: its 'to'",
            **frame_of(
                p.COMPACTED,
                {
                    "session_id": STRING,
                    "from": {"type": "integer", "minimum": 1},
                    "to": {"type": "integer", "minimum": 1},
                    "run_id": RUN_ID,
                },
            ),
        },
        # wire.sse.reset: a resume_rejected frame without request_id; retry 60000, no id; the end.
        "reset": {
            "description": "terminal: a resume_rejected frame; no id; retry: 60000",
            **frame_of(
                p.RESUME_REJECTED,
                {
                    "session_id": STRING,
                    "reason": {
                        "enum": [
                            p.R_NOT_FOUND,
                            p.R_EPOCH_MISMATCH,
                            p.R_CURSOR_AHEAD,
                            p.R_CURSOR_EXPIRED,
                        ]
                    },
                    "message": STRING,
                },
                {"head": SEQ, "earliest": SEQ, "epoch": STRING},
                allOf=[
                    {
                        "if": {"properties": {"reason": {"const": p.R_CURSOR_AHEAD}}},
                        "then": {"required": ["head"]},
                    },
                    {
                        "if": {"properties": {"reason": {"const": p.R_CURSOR_EXPIRED}}},
                        "then": {"required": ["earliest", "epoch"]},
                    },
                ],
                **{"not": {"required": ["request_id"]}},
            ),
        },
    }
