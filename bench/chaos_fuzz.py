"""Frame fuzzing for the chaos suite: a seeded generator of hostile frames.

Every frame a careless or hostile client could send: each frame type with
fields of the wrong type, huge and negative numbers, deep nesting, Unicode
edge cases (lone surrogates, NUL, bidi controls, non-characters), invalid
JSON, binary frames, oversized frames, valid frames in invalid orders
(commands before a handshake, a second handshake). The server must answer
each with an ``error`` frame or a documented close, never a traceback.
"""

from __future__ import annotations

import json
import random
from typing import Any

TYPES = ["start", "resume", "ack", "send", "decide", "cancel", "sync", "ping", "pong", "event"]
STRINGS = [
    "",
    "x",
    "\ud800",
    "\udfff",
    "a\x00b",
    "\u202etxt",
    "\uffff",
    "\U0001f600" * 50,
    "é" * 300,
    "' OR 1=1 --",
    "<script>alert(1)</script>",
    "../../etc/passwd",
    "x" * 7_000,
]
NUMBERS = [0, -1, 1, 2**31, 2**63, 10**30, -(10**30), 1.5, float("1e308"), True, False]


def _deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


class FrameGenerator:
    """Hostile frames from one seed: the same seed gives the same frames."""

    def __init__(self, seed: int, session_id: str, approval_id: str, run_id: str):
        self.rng = random.Random(seed)
        self.known = {"session_id": session_id, "approval_id": approval_id, "run_id": run_id}

    def value(self) -> Any:
        rng = self.rng
        pick = rng.random()
        if pick < 0.3:
            return rng.choice(STRINGS)
        if pick < 0.55:
            return rng.choice(NUMBERS)
        if pick < 0.65:
            return None
        if pick < 0.75:
            return _deep(rng.choice([2, 50, 500]))
        if pick < 0.85:
            return {"k": rng.choice(STRINGS[:5]), "n": rng.choice(NUMBERS)}
        return rng.choice(list(self.known.values()))

    def frame(self) -> str | bytes:
        """One frame, as the text (or bytes) to put on the wire."""
        rng = self.rng
        pick = rng.random()
        if pick < 0.04:
            deep = '{"type":"send","text":' + "[" * 20_000 + "]" * 20_000 + "}"
            return rng.choice(["{", "[1,", "nul", '{"type":', "\x00", "{}" * 5000, deep])
        if pick < 0.07:
            return bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 16, 2048])))
        if pick < 0.073:
            return json.dumps({"type": "ping", "pad": "x" * 70_000})  # over the frame limit
        if pick < 0.12:
            return json.dumps(rng.choice([[], 1, "s", None, True, _deep(100)]))
        frame: dict[str, Any] = {"type": rng.choice(TYPES + [None, 1, "", "x" * 500])}
        fields = [
            "protocol",
            "session_id",
            "after",
            "epoch",
            "tab_id",
            "title",
            "request_id",
            "client_message_id",
            "text",
            "approval_id",
            "decision",
            "run_id",
            "seq",
            "ts",
        ]
        for name in rng.sample(fields, rng.randint(0, 6)):
            frame[name] = self.value()
        if rng.random() < 0.3:
            frame["protocol"] = 1
        if rng.random() < 0.2:
            frame["decision"] = rng.choice(["approve", "deny", "maybe"])
        if rng.random() < 0.1:
            frame["text"] = "/sh date 010100002000" if rng.random() < 0.5 else "/write ../x y"
        if rng.random() < 0.05:
            frame[rng.choice(STRINGS[1:6])] = self.value()
        # ensure_ascii: lone surrogates go out as \\ud800 escapes, valid JSON.
        return json.dumps(frame)
