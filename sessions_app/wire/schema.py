"""Every frame of the session protocol as JSON Schema (2020-12), built from
``protocol``'s own names and limits, so the two cannot drift apart.

``docs/protocol.schema.json`` is this, written out (``manage.py
protocol_schema``); ``tests/wire/test_schema.py`` holds the file to it, the
parsers to the client frames' schemas, and a live server's frames to the
server frames' schemas. Each event kind's ``data``, the list socket's
frames and the SSE stream's own events are ``schema_data``'s.
"""

from __future__ import annotations

from typing import Any

from sessions_app.wire import protocol as p
from sessions_app.wire.schema_data import (
    ID,
    REPLY_ID,
    REQUEST_ID,
    RUN_ID,
    SEQ,
    event_data_schemas,
    frame_of,
    list_frames,
    sse_events,
)

FEATURES = {"type": "array", "items": {"type": "string"}, "maxItems": p.MAX_FEATURES}
KINDS = sorted(v for k, v in vars(p).items() if k.startswith("K_"))
SESSION = {"type": "string"}


def client_frames() -> dict[str, dict[str, Any]]:
    """What a client may send, by type (unknown fields are ignored by the server)."""
    text = {"type": "string", "minLength": 1, "maxLength": p.MAX_TEXT_CHARS, "pattern": r"\S"}
    return {
        p.START: frame_of(
            p.START,
            {"protocol": {"const": p.PROTOCOL_VERSION}},
            {
                "request_id": REQUEST_ID,
                "title": {"type": "string", "maxLength": p.MAX_TITLE_CHARS},
                "tab_id": {"type": "string", "minLength": 1, "maxLength": p.MAX_TAB_ID_CHARS},
                "features": FEATURES,
            },
        ),
        p.RESUME: frame_of(
            p.RESUME,
            {"protocol": {"const": p.PROTOCOL_VERSION}, "session_id": ID, "after": SEQ},
            {
                "request_id": REQUEST_ID,
                "epoch": {"type": "string", "description": "required when after > 0"},
                "tab_id": {"type": "string", "minLength": 1, "maxLength": p.MAX_TAB_ID_CHARS},
                "features": FEATURES,
            },
            **{
                "if": {"properties": {"after": {"minimum": 1}}},
                "then": {"required": ["epoch"], "properties": {"epoch": {"minLength": 1}}},
            },
        ),
        p.ACK: frame_of(p.ACK, {"seq": SEQ}),
        p.VISIBILITY: frame_of(p.VISIBILITY, {"visible": {"type": "boolean"}}),
        p.SEND: frame_of(
            p.SEND,
            {"client_message_id": ID},
            {
                "request_id": REQUEST_ID,
                "text": text,
                "interrupt": {"type": "boolean"},
                "regenerate": RUN_ID,
                "edit_of": RUN_ID,
            },
            **{
                "oneOf": [
                    {"required": ["text"], "not": {"required": ["regenerate"]}},
                    {
                        "required": ["regenerate"],
                        "not": {"anyOf": [{"required": ["text"]}, {"required": ["edit_of"]}]},
                    },
                ]
            },
        ),
        p.DECIDE: _decide(),
        p.CANCEL: frame_of(p.CANCEL, {"run_id": ID}, {"request_id": REQUEST_ID}),
        p.SYNC: frame_of(p.SYNC, {"after": SEQ}, {"request_id": REQUEST_ID}),
        p.SWITCH: frame_of(p.SWITCH, {"run_id": RUN_ID}, {"request_id": REQUEST_ID}),
        p.PING: frame_of(p.PING, {}, {"request_id": REQUEST_ID}),
    }


def _decide() -> dict[str, Any]:
    """``decide``: a gate, its decision, a denial's reason, an edit's args, a
    response, a question's answer, its whole step."""
    return frame_of(
        p.DECIDE,
        {"approval_id": ID, "decision": {"enum": list(p.ALL_DECISIONS)}},
        {
            "request_id": REQUEST_ID,
            "reason": {"type": "string", "maxLength": p.MAX_REASON_CHARS},
            "all": {"type": "boolean"},
            "args": {"type": "object"},
            "response": {"type": "string", "minLength": 1, "maxLength": p.MAX_RESPONSE_CHARS},
            # A question's form answered (wire.forms checks it against the form).
            "answer": {"type": "object"},
        },
        **{
            "allOf": [
                {
                    "if": {"properties": {"decision": {"const": p.EDIT}}},
                    "then": {"required": ["args"]},
                    "else": {"not": {"required": ["args"]}},
                },
                {
                    "if": {"properties": {"decision": {"const": p.RESPOND}}},
                    "then": {"required": ["response"]},
                    "else": {"not": {"required": ["response"]}},
                },
                {
                    "if": {"properties": {"decision": {"const": p.ANSWER}}},
                    "then": {"required": ["answer"]},
                    "else": {"not": {"required": ["answer"]}},
                },
                {
                    "if": {"properties": {"decision": {"enum": [p.EDIT, p.RESPOND, p.ANSWER]}}},
                    "then": {"not": {"properties": {"all": {"const": True}}, "required": ["all"]}},
                },
            ]
        },
    )


def server_frames() -> dict[str, dict[str, Any]]:
    """What the server sends, by type (a client ignores fields it does not know)."""
    error = {"request_id": REPLY_ID, "code": {"type": "string"}, "message": {"type": "string"}}
    return {
        **_handshake_answers(),
        **_log_frames(),
        **_command_replies(),
        **_pushes(),
        p.ERROR: frame_of(p.ERROR, error),
    }


def _handshake_answers() -> dict[str, dict[str, Any]]:
    """``start_ok``, ``resume_ok`` and ``resume_rejected``."""
    ok = {"request_id": REPLY_ID, "session_id": SESSION, "connection_id": {"type": "string"}}
    head = {"epoch": {"type": "string"}, "head": SEQ, "title": {"type": "string"}}
    reasons = [
        p.R_UNSUPPORTED_PROTOCOL,
        p.R_BAD_REQUEST,
        p.R_NOT_FOUND,
        p.R_EPOCH_MISMATCH,
        p.R_CURSOR_AHEAD,
        p.R_CURSOR_EXPIRED,
    ]
    rejected = {
        "request_id": REPLY_ID,
        "session_id": {"type": ["string", "null"]},
        "reason": {"enum": reasons},
        "message": {"type": "string"},
    }
    return {
        p.START_OK: frame_of(p.START_OK, {**ok, **head}, {"features": FEATURES}),
        p.RESUME_OK: frame_of(p.RESUME_OK, {**ok, **head, "after": SEQ}, {"features": FEATURES}),
        p.RESUME_REJECTED: frame_of(
            p.RESUME_REJECTED,
            rejected,
            {"head": SEQ, "earliest": SEQ, "epoch": {"type": "string"}},
        ),
    }


def _log_frames() -> dict[str, dict[str, Any]]:
    """What carries the log: ``event``, ``compacted`` and their ``batch``."""
    event = frame_of(
        p.EVENT,
        {
            "session_id": SESSION,
            "seq": {"type": "integer", "minimum": 1},
            "kind": {"type": "string", "description": "one of: " + ", ".join(KINDS)},
            "run_id": {"type": ["string", "null"]},
            "ts": {"type": "string"},
            "data": {"type": "object"},
        },
        # Each known kind's data (#/$defs/data.<kind>); an unknown kind's is
        # any object (a client ignores kinds it does not know).
        allOf=[
            {
                "if": {"properties": {"kind": {"const": kind}}},
                "then": {"properties": {"data": {"$ref": f"#/$defs/data.{kind}"}}},
            }
            for kind in KINDS
        ],
    )
    compacted = frame_of(
        p.COMPACTED,
        {
            "session_id": SESSION,
            "from": {"type": "integer", "minimum": 1},
            "to": {"type": "integer", "minimum": 1},
            "run_id": {"type": ["string", "null"]},
        },
    )
    return {
        p.EVENT: event,
        p.COMPACTED: compacted,
        p.BATCH: frame_of(
            p.BATCH,
            {"frames": {"type": "array", "items": {"oneOf": [event, compacted]}}},
        ),
    }


def _command_replies() -> dict[str, dict[str, Any]]:
    """Each command's ``…_ok``."""
    sent = {
        "request_id": REPLY_ID,
        "client_message_id": {"type": "string"},
        "seq": SEQ,
        "run_id": {"type": "string"},
        "status": {"enum": [p.SEND_STARTED, p.SEND_QUEUED, p.SEND_DUPLICATE]},
    }
    decided = {
        "request_id": REPLY_ID,
        "approval_id": {"type": "string"},
        "decision": {"enum": list(p.ALL_DECISIONS)},
    }
    switched = {
        "request_id": REPLY_ID,
        "run_id": {"type": "string"},
        "leaf_run_id": {"type": "string"},
    }
    return {
        p.SEND_OK: frame_of(p.SEND_OK, sent),
        p.DECIDE_OK: frame_of(p.DECIDE_OK, decided),
        p.CANCEL_OK: frame_of(p.CANCEL_OK, {"request_id": REPLY_ID, "run_id": {"type": "string"}}),
        p.SYNC_OK: frame_of(p.SYNC_OK, {"request_id": REPLY_ID, "after": SEQ, "head": SEQ}),
        p.SWITCH_OK: frame_of(p.SWITCH_OK, switched),
        p.PONG: frame_of(p.PONG, {"request_id": REPLY_ID}),
    }


def _pushes() -> dict[str, dict[str, Any]]:
    """What the server says unasked, beside the log: ``presence``, ``title``."""
    viewers = {
        "session_id": SESSION,
        "viewers": {"type": "integer", "minimum": 0},
        "running": {"type": "boolean"},
    }
    return {
        p.PRESENCE: frame_of(p.PRESENCE, viewers, {"head": {"type": ["integer", "null"]}}),
        p.TITLE: frame_of(p.TITLE, {"session_id": SESSION, "title": {"type": "string"}}),
    }


def document() -> dict[str, Any]:
    """The whole schema: every frame under ``$defs``, and the two unions."""
    client, server = client_frames(), server_frames()
    listing = list_frames()
    defs = {f"client.{k}": v for k, v in client.items()}
    defs |= {f"server.{k}": v for k, v in server.items()}
    defs |= {f"data.{k}": v for k, v in event_data_schemas().items()}
    defs |= {f"list.client.{k}": v for k, v in listing["client"].items()}
    defs |= {f"list.server.{k}": v for k, v in listing["server"].items()}
    defs |= {f"sse.{k}": v for k, v in sse_events().items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://agent-sessions.invalid/protocol/1/frames.schema.json",
        "title": f"Session protocol, version {p.PROTOCOL_VERSION}: every frame",
        "description": (
            "Generated from sessions_app/wire/protocol.py (manage.py protocol_schema); the "
            "normative text is docs/protocol.md. Use #/$defs/client or #/$defs/server "
            "(the session socket), #/$defs/list.client or #/$defs/list.server (the list "
            "socket); data.<kind> is each event kind's data, sse.<event> the SSE "
            "stream's own events."
        ),
        "$defs": {
            **defs,
            "client": {"oneOf": [{"$ref": f"#/$defs/client.{k}"} for k in client]},
            "server": {"oneOf": [{"$ref": f"#/$defs/server.{k}"} for k in server]},
            "list.client": {
                "oneOf": [{"$ref": f"#/$defs/list.client.{k}"} for k in listing["client"]]
            },
            "list.server": {
                "oneOf": [{"$ref": f"#/$defs/list.server.{k}"} for k in listing["server"]]
            },
        },
    }
