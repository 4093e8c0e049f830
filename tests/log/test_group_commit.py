"""Group commit (``sessions_app.log.group_commit``) and the batch append under it:
shared commits that keep every promise of a lone append."""

from __future__ import annotations

import threading

import pytest
from django.db import DataError, close_old_connections, connection
from prometheus_client import REGISTRY

from sessions_app.log import events as events_module
from sessions_app.log.events import NewEvent, RunGuard, append_batch, read_events
from sessions_app.log.group_commit import GroupCommitter
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, Run
from sessions_app.wire.errors import RunAborted, SessionGone

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published(monkeypatch):
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def record(session_id, frame):
        with lock:
            seen.append((session_id, frame["seq"]))

    monkeypatch.setattr(events_module.fanout, "publish_event", record)
    return seen


def _delta(text: str) -> list[NewEvent]:
    return [NewEvent("assistant.delta", {"text": text})]


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_many_threads_share_commits_and_every_session_stays_contiguous(user, published):
    """Twenty threads appending to ten sessions at once share batches; each
    session's log is 1..head with no hole or repeat, each thread's appends are in
    its order, and every event is published once."""
    committer = GroupCommitter()
    sessions = [create_session(user, f"s{i}").id for i in range(10)]
    published.clear()
    per_thread = 30
    commits_before = _sample("agent_group_commit_appends_count")
    appends_before = _sample("agent_group_commit_appends_sum")
    got: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(20)

    def work(n: int) -> None:
        try:
            start.wait()
            seqs = []
            for i in range(per_thread):
                [event] = committer.append(sessions[n % 10], _delta(f"{n}:{i}"))
                seqs.append(event.seq)
            got[n] = seqs
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert committer.appends == 20 * per_thread
    assert committer.batches < committer.appends  # commits were shared
    # The metric an operator reads says the same: commits, and appends in them.
    assert _sample("agent_group_commit_appends_count") - commits_before == committer.batches
    assert _sample("agent_group_commit_appends_sum") - appends_before == 20 * per_thread
    for n, seqs in got.items():
        assert seqs == sorted(seqs), f"thread {n} appended out of its order"
    for i, session_id in enumerate(sessions):
        log = read_events(session_id, 0)
        assert [e.seq for e in log] == list(range(1, 2 * per_thread + 2))
        assert AgentSession.objects.get(id=session_id).head == 2 * per_thread + 1
        texts = [e.data["text"] for e in log[1:]]
        for n in (i, i + 10):  # each thread's own texts, in its order
            assert [t for t in texts if t.startswith(f"{n}:")] == [
                f"{n}:{k}" for k in range(per_thread)
            ]
    assert sorted(published) == sorted(
        (s, seq) for s in sessions for seq in range(2, 2 * per_thread + 2)
    )


def test_a_refused_append_in_a_batch_fails_alone(user, published, no_enqueue):
    """In one batch: an append for a run this worker no longer holds gets
    RunAborted, one for a deleted session SessionGone, data that is not JSON a
    TypeError; the others are stored and published."""
    from sessions_app.runtime.turns import submit_message

    a, b = create_session(user, "a"), create_session(user, "b")
    gone = create_session(user, "gone")
    gone_id = gone.id
    gone.delete()
    submit_message(b.id, "m1", "hello")
    run = Run.objects.get(session_id=b.id)
    published.clear()
    results = append_batch(
        [
            (a.id, _delta("one"), None),
            (b.id, _delta("not mine"), RunGuard(run.id, "another-worker")),
            (gone_id, _delta("nobody"), None),
            (a.id, [NewEvent("assistant.delta", {"text": object()})], None),
            (a.id, _delta("two"), None),
        ]
    )
    assert [e.seq for e in results[0]] == [2]
    assert isinstance(results[1], RunAborted)
    assert isinstance(results[2], SessionGone)
    assert isinstance(results[3], TypeError)
    assert [e.seq for e in results[4]] == [3]
    assert [e.data["text"] for e in read_events(a.id, 1)] == ["one", "two"]
    b_head = AgentSession.objects.get(id=b.id).head
    assert [e.seq for e in read_events(b.id, 0)] == list(range(1, b_head + 1))
    assert published == [(a.id, 2), (a.id, 3)]


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite stores a NUL; PostgreSQL's jsonb refuses it"
)
def test_a_statement_failing_for_one_request_retries_each_alone(user, published):
    """A request whose data the database refuses rolls the batch back; every
    request is then appended alone, so only that one fails."""
    committer = GroupCommitter()
    a, b = create_session(user, "a"), create_session(user, "b")
    published.clear()
    # Queue three requests, then let one thread lead them as one batch.
    from sessions_app.log.group_commit import AppendRequest

    requests = [
        AppendRequest(a.id, _delta("fine"), None),
        AppendRequest(b.id, _delta("nul \x00 here"), None),
        AppendRequest(a.id, _delta("also fine"), None),
    ]
    committer.lead_batch(requests)
    assert all(r.retry and r.finished for r in requests)
    assert committer.retried == 3 and committer.appends == 0
    assert AgentSession.objects.get(id=a.id).head == 1  # nothing was committed
    # Each thread then appends its own alone (what ``append`` does on retry).
    assert [e.seq for e in committer.append(a.id, _delta("fine"))] == [2]
    with pytest.raises(DataError):
        committer.append(b.id, _delta("nul \x00 here"))
    assert [e.seq for e in committer.append(a.id, _delta("also fine"))] == [3]
    assert published == [(a.id, 2), (a.id, 3)]


def test_an_append_inside_a_transaction_is_not_group_committed(user, settings):
    """A run append made inside the caller's transaction joins that transaction
    (and commits with it), never a batch of other threads."""
    from django.db import transaction

    from sessions_app.log import group_commit

    settings.AGENT_GROUP_COMMIT = True
    s = create_session(user)
    before = group_commit.committer.appends
    with transaction.atomic():
        group_commit.append_event(s.id, "assistant.delta", {"text": "x"}, None, guard=None)
    assert group_commit.committer.appends == before
    group_commit.append_event(s.id, "assistant.delta", {"text": "y"}, None, guard=None)
    assert group_commit.committer.appends == before + 1
    assert [e.seq for e in read_events(s.id, 0)] == [1, 2, 3]


@pytest.mark.parametrize(
    ("sqlstate", "lost"),
    [
        ("40P01", False),
        ("55P03", False),
        ("57014", False),
        ("22P05", False),
        ("08006", True),
        ("57P01", True),
    ],
)
def test_only_a_lost_connection_keeps_a_batch_from_being_retried(sqlstate, lost):
    """A statement the server refused (a deadlock, a lock or statement timeout, bad
    data) committed nothing, so each request retries alone; a connection that
    failed (outcome unknown) is not retried."""
    from django.db import OperationalError

    from sessions_app.log.group_commit import _connection_lost

    class Refusal(Exception):
        pass

    cause = Refusal()
    cause.sqlstate = sqlstate
    exc = OperationalError("refused")
    exc.__cause__ = cause
    assert _connection_lost(exc) is lost
