"""Every frame the server sends is built in ``sessions_app/wire`` (``frames``,
``sse``): one place to read what goes out, and no second copy to drift."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from sessions_app.wire import frames
from sessions_app.wire import protocol as p

APP = Path(__file__).resolve().parents[2] / "sessions_app"
SERVER_TYPES = {name for name, value in vars(p).items() if value in p.SERVER_FRAMES}


def _frame_type(node: ast.Dict) -> str | None:
    """The server frame type a dict display builds, if it builds one."""
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and key.value == "type"):
            continue
        if isinstance(value, ast.Constant) and value.value in p.SERVER_FRAMES:
            return value.value
        if isinstance(value, ast.Attribute) and value.attr in SERVER_TYPES:
            return value.attr
    return None


def test_no_server_frame_is_built_outside_the_wire():
    """No module outside wire/ writes a dict whose type is a frame the server
    sends (the review counted 18, and send_ok twice)."""
    found = []
    for path in APP.rglob("*.py"):
        relative = path.relative_to(APP)
        if relative.parts[0] in ("wire", "migrations"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict) and (kind := _frame_type(node)):
                found.append(f"{relative}:{node.lineno} {kind}")
    assert found == []


def test_the_check_sees_a_frame_built_by_hand():
    """The scan finds both spellings of a frame built by hand."""
    tree = ast.parse('a = {"type": p.SEND_OK, "x": 1}\nb = {"type": "pong"}\nc = {"type": "x"}')
    kinds = [_frame_type(n) for n in ast.walk(tree) if isinstance(n, ast.Dict)]
    assert kinds == ["SEND_OK", "pong", None]


@pytest.mark.parametrize(
    ("data", "literal"),
    [
        ('{"text":"tok0 "}', '"tok0 "'),
        ('{"text": "tok0 "}', '"tok0 "'),  # PostgreSQL's jsonb, SQLite's json.dumps
        ('{"text": "a\\\\"}', '"a\\\\"'),
        ('{"text": "say \\"hi\\""}', '"say \\"hi\\""'),
        ('{"text":"a","x":"b"}', None),
        ('{"text": "a\\\\","x":"b"}', None),
        ('{"text":"a","x":1}', None),
        ('{"x":"a"}', None),
    ],
)
def test_a_deltas_text_is_read_as_written_or_not_at_all(data, literal):
    """``text_literal`` gives a delta's text as the frame wrote it (compact or
    spaced), and None for any data that is not one text alone."""
    head = '{"type":"event","session_id":"s","seq":4,"kind":"assistant.delta",'
    text = head + '"run_id":"r","ts":"2026-12-06T07:36:32.030Z","data":' + data + "}"
    assert frames.text_literal(text) == literal
    if literal is not None:
        assert json.loads(literal) == json.loads(data)["text"]


def test_a_deltas_header_holds_its_run_marker_whichever_way_it_was_built():
    """``delta_marker`` (the dialects' one search for "a delta of this run")
    is in a delta's frame built live (``event_frame``) and built from the
    database's rows (``event_texts``), and in no other run's or kind's."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    at = datetime(2026, 12, 6, 7, 36, 32, tzinfo=UTC)
    live = frames.dumps(
        frames.event_frame(
            SimpleNamespace(
                session_id="s",
                seq=4,
                kind="assistant.delta",
                run_id="run_a",
                created_at=at,
                data={"text": "x"},
            )
        )
    )
    rows = [
        (4, "assistant.delta", "run_a", "2026-12-06T07:36:32.000Z", '{"text": "x"}'),
        (5, "assistant.delta", "run_b", "2026-12-06T07:36:32.000Z", '{"text": "x"}'),
        (6, "assistant.message", "run_a", "2026-12-06T07:36:32.000Z", '{"text": "x"}'),
    ]
    stored = [text for text, _ in frames.event_texts("s", rows)]
    marker = frames.delta_marker("run_a")
    assert [marker in text for text in [live, *stored]] == [True, True, False, False]
    for text in (live, stored[0]):
        assert frames.text_literal(text, text.find(marker)) == '"x"'
