"""append_events: seqs without holes or duplicates, published only after commit."""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, transaction

from sessions_app.log import events as events_module
from sessions_app.log.events import NewEvent, append_event, append_events, read_events
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, Event

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published(monkeypatch):
    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(
        events_module.fanout,
        "publish_event",
        lambda session_id, frame: seen.append((session_id, frame["seq"])),
    )
    return seen


def test_create_session_logs_session_created(user):
    """A new session's log starts with seq 1 session.created."""
    s = create_session(user, "t")
    assert [(e.seq, e.kind, e.data) for e in read_events(s.id, 0)] == [
        (1, "session.created", {"title": "t"})
    ]
    assert s.head == 1 and len(s.id) > 20 and s.id.startswith("s_")


def test_batch_append_is_contiguous_and_published_in_order(user, published):
    """A batch gets consecutive seqs and is published in order, once, after commit."""
    s = create_session(user)
    published.clear()
    batch = append_events(s.id, [NewEvent("a", {}), NewEvent("b", {}), NewEvent("c", {})])
    assert [e.seq for e in batch] == [2, 3, 4]
    assert published == [(s.id, 2), (s.id, 3), (s.id, 4)]
    assert AgentSession.objects.get(id=s.id).head == 4


def test_rolled_back_append_leaves_no_event_and_publishes_nothing(user, published):
    """An append inside a transaction that rolls back is neither stored nor published."""
    s = create_session(user)
    published.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        append_event(s.id, "assistant.delta", {"text": "x"})
        raise RuntimeError("roll back")
    assert published == []
    assert AgentSession.objects.get(id=s.id).head == 1
    assert list(Event.objects.filter(session=s).values_list("seq", flat=True)) == [1]
    assert append_event(s.id, "assistant.delta", {"text": "y"}).seq == 2


def test_publication_waits_for_the_outer_commit(user, published):
    """Nothing is published while the enclosing transaction is still open."""
    s = create_session(user)
    published.clear()
    with transaction.atomic():
        append_event(s.id, "a")
        append_event(s.id, "b")
        assert published == []
    assert published == [(s.id, 2), (s.id, 3)]


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_data_no_browser_could_read_is_refused_and_nothing_logged(user, published, number):
    """An event holding NaN or an infinity (a tool's result, say) would be a
    frame no tab's JSON.parse reads: its append fails (ValueError) and the
    log, the head and the fan-out stay as they were."""
    s = create_session(user)
    published.clear()
    with pytest.raises(ValueError):
        append_event(s.id, "tool.result", {"output": {"ratio": number}})
    assert published == []
    assert AgentSession.objects.get(id=s.id).head == 1
    assert append_event(s.id, "tool.result", {"output": {"ratio": 0.5}}).seq == 2


def test_eight_concurrent_writers_produce_exactly_1_to_n(user):
    """Eight threads appending to one session produce seq 1..N, no hole, no duplicate."""
    s = create_session(user)
    per_writer, writers = 150, 8
    errors: list[BaseException] = []
    barrier = threading.Barrier(writers)

    def write(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_writer):
                append_event(s.id, "assistant.delta", {"text": f"{n}:{i}"})
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    total = 1 + per_writer * writers
    seqs = list(Event.objects.filter(session=s).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, total + 1))
    assert AgentSession.objects.get(id=s.id).head == total
    # Each writer's own events are in its own order.
    for n in range(writers):
        mine = [e.data["text"] for e in read_events(s.id, 1) if e.data["text"].startswith(f"{n}:")]
        assert mine == [f"{n}:{i}" for i in range(per_writer)]


def test_read_events_reads_only_after_the_cursor(user):
    """A resume read is a range: after < seq <= upto, in order."""
    s = create_session(user)
    for i in range(10):
        append_event(s.id, "x", {"i": i})
    assert [e.seq for e in read_events(s.id, 7)] == [8, 9, 10, 11]
    assert [e.seq for e in read_events(s.id, 3, 5)] == [4, 5]
    assert [e.seq for e in read_events(s.id, 0, limit=2)] == [1, 2]


def test_purge_sets_earliest_and_keeps_the_rest(user):
    """purge_events deletes before a seq and records it as the earliest kept."""
    from django.core.management import call_command

    s = create_session(user)
    for i in range(9):
        append_event(s.id, "x", {"i": i})
    call_command("purge_events", s.id, "--keep", "4")
    s.refresh_from_db()
    assert s.earliest == 7 and s.head == 10
    assert [e.seq for e in read_events(s.id, 0)] == [7, 8, 9, 10]


def test_guarded_append_refuses_once_the_run_is_not_held(user, monkeypatch):
    """An append under a RunGuard succeeds while the worker holds the run and raises
    RunAborted, appending nothing, once it was cancelled or taken over."""
    from sessions_app.log.events import RunGuard
    from sessions_app.runtime import leases, runs, turns
    from sessions_app.wire.errors import RunAborted

    monkeypatch.setattr(runs, "enqueue", lambda run_id: None)
    s = create_session(user)
    run_id = turns.submit_message(s.id, "m1", "/stream 1 0").run_id
    assert leases.claim(run_id, "me")
    guard = RunGuard(run_id, "me")
    ev = append_event(s.id, "assistant.delta", {"text": "a"}, run_id, guard=guard)
    with pytest.raises(RunAborted):
        append_event(s.id, "assistant.delta", {"text": "b"}, run_id, guard=RunGuard(run_id, "x"))
    runs.cancel(run_id, "alice")
    head = AgentSession.objects.get(id=s.id).head
    with pytest.raises(RunAborted):
        append_event(s.id, "assistant.delta", {"text": "c"}, run_id, guard=guard)
    assert AgentSession.objects.get(id=s.id).head == head
    texts = [e.data.get("text") for e in read_events(s.id, 0) if e.kind == "assistant.delta"]
    assert texts == ["a"] and ev.seq == 4


def test_replay_frames_are_the_frames_of_the_logged_events(user):
    """read_frames (a replay page as text, read without the ORM) says exactly what
    event_frame says of each event: same fields, same values, same order."""
    import json
    from datetime import UTC, datetime

    from sessions_app.log.events import read_frames
    from sessions_app.wire.frames import event_frame

    s = create_session(user)
    append_event(s.id, "assistant.delta", {"text": 'héllo "q" \\ \u2028 😀'}, "r_abc")
    append_event(s.id, "tool.call", {"args": {"n": [1, 2.5, None, True]}, "path": "a/b"})
    # A timestamp on a whole second (stored without a fraction by SQLite).
    Event.objects.filter(session=s, seq=3).update(
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    )
    texts = read_frames(s.id, 0, 3, 500)
    assert [seq for _, seq in texts] == [1, 2, 3]
    expected = [json.loads(json.dumps(event_frame(e))) for e in read_events(s.id, 0)]
    assert [json.loads(text) for text, _ in texts] == expected
    assert json.loads(texts[2][0])["ts"] == "2026-01-02T03:04:05.000Z"
    assert read_frames(s.id, 1, 2, 500)[0][1] == 2
    assert [seq for _, seq in read_frames(s.id, 0, 3, 2)] == [1, 2]
