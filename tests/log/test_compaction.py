"""compaction.py and the handshake feature "compact": superseded deltas skipped in
replays (against a real daphne), equal transcripts at every cursor (through the
browser client's own reducer, in node), and the partial index they read."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from django.db import connection

from sessions_app.log.compaction import compacted_plan, read_skeleton, superseded_ranges
from sessions_app.log.events import append_event
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession
from sessions_app.wire import protocol as p
from tests.harness import WsClient

pytestmark = pytest.mark.django_db(transaction=True)

REPLAY_MODEL_JS = Path(__file__).resolve().parents[1] / "js" / "replay_model.mjs"

D, M = p.K_ASSISTANT_DELTA, p.K_ASSISTANT_MESSAGE


def _log(session_id: str, script: list[tuple[str, str | None, dict]]) -> None:
    for kind, run_id, data in script:
        append_event(session_id, kind, data, run_id)


def _deltas(run_id: str, n: int, start: int = 0):
    return [(D, run_id, {"text": f"tok{start + i} "}) for i in range(n)]


def _turn_start(run_id: str, text: str):
    return [
        (p.K_USER_MESSAGE, run_id, {"client_message_id": f"m-{run_id}", "text": text}),
        (p.K_RUN_STARTED, run_id, {"client_message_id": f"m-{run_id}"}),
    ]


def _finished(run_id: str, reason: str = "end_turn"):
    return [(p.K_RUN_FINISHED, run_id, {"stop_reason": reason})]


def build_mixed_log(user) -> tuple[AgentSession, list[tuple[int, int]]]:
    """A log with every shape compaction must get right; returns the session and
    the superseded (first, last) stretches it holds."""
    s = create_session(user, "mixed")  # seq 1
    script = []
    # A: a plain streamed answer (seqs 2-3, deltas 4-8, message 9, finished 10).
    script += _turn_start("A", "a") + _deltas("A", 5)
    script += [(M, "A", {"text": "tok0 tok1 tok2 tok3 tok4 "})] + _finished("A")
    # B: text, a tool call behind a gate, more text: the first segment's deltas
    # (13-15) are kept, the second's (21-24) superseded by the message (25).
    script += _turn_start("B", "b") + _deltas("B", 3)
    script += [
        (p.K_TOOL_CALL, "B", {"tool_call_id": "tc1", "tool": "write_file", "args": {}}),
        (
            p.K_APPROVAL_REQUESTED,
            "B",
            {"approval_id": "ap1", "tool_call_id": "tc1", "tool": "write_file", "args": {}},
        ),
        (p.K_RUN_PAUSED, "B", {"stop_reason": "requires_approval", "approval_id": "ap1"}),
        (p.K_APPROVAL_DECIDED, "B", {"approval_id": "ap1", "decision": "approve"}),
        (p.K_TOOL_RESULT, "B", {"tool_call_id": "tc1", "ok": True, "output": "done"}),
    ]
    script += _deltas("B", 4, 10) + [(M, "B", {"text": "tok10 tok11 tok12 tok13 "})]
    script += _finished("B")
    # C: an input queued (D) while C streams splits its deltas in two stretches.
    script += _turn_start("C", "c") + _deltas("C", 2)
    script += [
        (p.K_USER_MESSAGE, "D", {"client_message_id": "m-D", "text": "d"}),
        (p.K_RUN_QUEUED, "D", {"client_message_id": "m-D"}),
    ]
    script += _deltas("C", 2, 2) + [(M, "C", {"text": "tok0 tok1 tok2 tok3 "})] + _finished("C")
    # D: cancelled mid-stream, no message: its deltas are kept.
    script += [(p.K_RUN_STARTED, "D", {"client_message_id": "m-D"})] + _deltas("D", 3)
    script += _finished("D", "cancelled")
    # E: still streaming: kept.
    script += _turn_start("E", "e") + _deltas("E", 3)
    _log(s.id, script)
    s.refresh_from_db()
    expected = [(4, 8), (21, 24), (29, 30), (33, 34)]
    return s, expected


def test_superseded_ranges_rule():
    """A stretch is superseded only when its segment ends in a message within range;
    queued inputs of other runs do not end a segment, anything else does."""
    sk = [
        (2, p.K_USER_MESSAGE, "A"),
        (3, p.K_RUN_STARTED, "A"),
        (7, M, "A"),  # 4-6 superseded
        (10, p.K_TOOL_CALL, "B"),  # 8-9 kept
        (12, p.K_USER_MESSAGE, "C"),  # 11 waits
        (14, M, "B"),  # 11 and 13 superseded
        (16, p.K_RUN_FINISHED, "B"),  # 15 kept: no message
    ]
    assert superseded_ranges(sk, 1, 20) == [(4, 6, "A"), (11, 11, "B"), (13, 13, "B")]
    # The message past the range's end supersedes nothing in it.
    assert superseded_ranges(sk, 1, 13) == [(4, 6, "A")]
    # A cursor inside a stretch: the rest of it.
    assert superseded_ranges(sk, 5, 20)[0] == (6, 6, "A")
    assert superseded_ranges([], 0, 10) == []


def test_plan_of_a_mixed_log(user):
    """The plan names exactly the superseded stretches, for any start."""
    s, expected = build_mixed_log(user)
    assert [(a, b) for a, b, _ in compacted_plan(s.id, 0, s.head)] == expected
    assert [r for _, _, r in compacted_plan(s.id, 0, s.head)] == ["A", "B", "C", "C"]
    assert [(a, b) for a, b, _ in compacted_plan(s.id, 6, s.head)][0] == (7, 8)
    assert compacted_plan(s.id, s.head, s.head) == []


def test_skeleton_reads_the_partial_index(user):
    """The skeleton query is answered through event_skeleton, not by reading deltas."""
    s, _ = build_mixed_log(user)
    from sessions_app.log.compaction import _SKELETON

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + _SKELETON, [s.id, 0, s.head])
        else:
            cursor.execute("SET enable_seqscan = off")
            cursor.execute("EXPLAIN " + _SKELETON, [s.id, 0, s.head])
        plan = " ".join(str(row) for row in cursor.fetchall())
        if connection.vendor != "sqlite":
            cursor.execute("RESET enable_seqscan")
    assert "event_skeleton" in plan, plan
    assert [seq for seq, _, _ in read_skeleton(s.id, 0, s.head)][:3] == [1, 2, 3]


async def _replay(server, cookie, session, after: int, features=None) -> tuple[dict, list[dict]]:
    """Resume at ``after`` and return resume_ok and the replay's frames (events and
    compacted), up to the presence frame every socket gets after its replay."""
    c = await WsClient.connect(server.ws, cookie)
    kw = {"features": features} if features is not None else {}
    ok = await c.resume(session.id, after, epoch=session.epoch if after else None, **kw)
    assert ok["type"] == "resume_ok", ok
    await c.wait(lambda f: f.get("type") == "presence")
    frames = [f for f in c.frames if f.get("type") in ("event", "compacted")]
    await c.close()
    return ok, frames


def _covered(frames: list[dict]) -> list[int]:
    out = []
    for f in frames:
        out.extend([f["seq"]] if f["type"] == "event" else range(f["from"], f["to"] + 1))
    return out


def _models(cases: list[list[dict]]) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is required (the README's test command installs nothing else for JS)")
    out = subprocess.run(
        [node, str(REPLAY_MODEL_JS)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)["results"]


async def test_compacted_replay_at_every_cursor_renders_the_full_transcript(server, cookie, user):
    """At every cursor, a compacted replay covers after+1..head contiguously, skips
    exactly the superseded stretches there, and the client's reducer ends with the
    transcript a full replay gives."""
    s, expected = await _sync(build_mixed_log, user)
    ok, full = await _replay(server, cookie, s, 0)
    assert "features" not in ok, "a version 1 client sees exactly version 1"
    assert [f["seq"] for f in full] == list(range(1, s.head + 1))
    cases = [full]
    for after in range(0, s.head + 1):
        ok, frames = await _replay(server, cookie, s, after, features=["compact", "future-x"])
        assert ok["features"] == ["compact"]
        assert _covered(frames) == list(range(after + 1, s.head + 1)), after
        skipped = [(f["from"], f["to"]) for f in frames if f["type"] == "compacted"]
        want = [(max(a, after + 1), b) for a, b in expected if b > after]
        assert skipped == want, after
        cases.append(full[:after] + frames)
    results = _models(cases)
    reference = results[0]
    assert reference["cursor"] == s.head
    for after, result in enumerate(results[1:]):
        assert result["cursor"] == s.head
        assert result["model"] == reference["model"], f"cursor {after}"


async def test_sync_is_compacted_too(server, cookie, user):
    """A sync over a long range on a compacting socket skips superseded stretches."""
    s = await _sync(create_session, user, "long")
    script = _turn_start("R", "go") + _deltas("R", 100)
    script += [(M, "R", {"text": "all"})] + _finished("R")
    await _sync(_log, s.id, script)
    s = await _sync(AgentSession.objects.get, id=s.id)
    c = await WsClient.connect(server.ws, cookie)
    await c.resume(s.id, s.head, epoch=s.epoch, features=["compact"])
    reply = await c.request({"type": "sync", "after": 1})
    assert reply["type"] == "sync_ok" and reply["head"] == s.head
    last = await c.wait(lambda f: f.get("type") == "event" and f["seq"] == s.head)
    got = c.frames[c.frames.index(reply) + 1 : c.frames.index(last) + 1]
    assert [(f["type"], f.get("seq", f.get("from"))) for f in got] == [
        ("event", 2),
        ("event", 3),
        ("compacted", 4),
        ("event", 104),
        ("event", 105),
    ]
    await c.close()


async def test_bad_features_are_a_bad_request(server, cookie, user):
    """features must be a list of strings: anything else is bad_request, socket kept."""
    s = await _sync(create_session, user)
    c = await WsClient.connect(server.ws, cookie)
    for bad in ("compact", [1], {"compact": True}, ["x"] * 17):
        reply = await c.resume(s.id, 0, features=bad)
        assert reply["type"] == "resume_rejected" and reply["reason"] == "bad_request", bad
    bad = await c.request({"type": "start", "protocol": 1, "features": "compact"})
    assert bad["type"] == "error" and bad["code"] == "bad_frame"
    ok = await c.request({"type": "start", "protocol": 1, "features": ["compact"]})
    assert ok["type"] == "start_ok" and ok["features"] == ["compact"]
    await c.close()


async def _sync(fn, *args, **kwargs):
    from channels.db import database_sync_to_async

    return await database_sync_to_async(fn, thread_sensitive=False)(*args, **kwargs)


async def test_batched_replay_carries_the_same_frames_in_order(server, cookie, user):
    """With "batch" a replay's frames arrive several to a message, each exactly as it
    would have come alone, in the same order, all before the presence that follows."""
    s, _ = await _sync(build_mixed_log, user)
    for after in (0, 5, 20):
        _, alone = await _replay(server, cookie, s, after, features=["compact"])
        c = await WsClient.connect(server.ws, cookie)
        ok = await c.resume(
            s.id, after, epoch=s.epoch if after else None, features=["batch", "compact"]
        )
        assert ok["features"] == ["compact", "batch"]
        await c.wait(lambda f: f.get("type") == "presence")
        batches = [f for f in c.frames if f.get("type") == "batch"]
        assert batches and not any(f.get("type") in ("event", "compacted") for f in c.frames)
        assert [inner for b in batches for inner in b["frames"]] == alone
        kinds = [f["type"] for f in c.frames]
        assert kinds.index("presence") > max(i for i, k in enumerate(kinds) if k == "batch")
        await c.close()
