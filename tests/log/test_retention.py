"""retention.py: purging superseded deltas keeps every transcript (at every cursor,
while tabs replay), version 1 clients are told cursor_expired, idle sessions go,
and epoch rotation sends every open tab back through epoch_mismatch."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import pytest
import websockets
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.utils import timezone

from sessions_app.log.retention import apply_retention, rotate_epoch
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, Event, Run
from sessions_app.wire import protocol as p
from tests.harness import WsClient
from tests.log.test_compaction import _covered, _models, _replay, build_mixed_log

pytestmark = pytest.mark.django_db(transaction=True)

LONG_AGO = timedelta(days=30)


def _finish_runs(session: AgentSession, *run_ids: str, ago: timedelta = LONG_AGO) -> None:
    """Run rows for the log's finished turns (build_mixed_log writes events only)."""
    seqs = dict(
        Event.objects.filter(session=session, kind=p.K_USER_MESSAGE).values_list("run_id", "seq")
    )
    for run_id in run_ids:
        Run.objects.create(
            id=run_id,
            session=session,
            client_message_id=f"m-{run_id}",
            text=run_id.lower(),
            message_seq=seqs[run_id],
            status=Run.Status.FINISHED,
            stop_reason="end_turn",
            finished_at=timezone.now() - ago,
        )


def _kinds(session_id: str) -> list[tuple[int, str]]:
    return list(Event.objects.filter(session_id=session_id).values_list("seq", "kind"))


def test_purge_deletes_only_superseded_deltas_of_old_runs(user):
    """Old finished runs lose their superseded deltas and nothing else; recent runs,
    kept stretches (before a tool call, a cancelled run, a running one) stay."""
    s, expected = build_mixed_log(user)
    _finish_runs(s, "A", "B", "D")
    _finish_runs(s, "C", ago=timedelta(hours=1))
    before = _kinds(s.id)
    report = apply_retention(deltas_days=7)
    gone = {seq for a, b in expected[:2] for seq in range(a, b + 1)}  # A's and B's
    assert report.deltas_deleted == len(gone) and report.sessions_compacted == 1
    assert _kinds(s.id) == [(seq, kind) for seq, kind in before if seq not in gone]
    s.refresh_from_db()
    assert s.compacted_through == expected[1][1] and s.earliest == 1
    # Idempotent: a second pass finds nothing.
    assert apply_retention(deltas_days=7).deltas_deleted == 0


def test_a_run_queued_behind_another_is_purged_when_it_finishes_later(user):
    """A run whose input came while another streamed (an earlier message_seq)
    and that finishes after a purge pass is purged by a later pass."""
    from tests.log.test_compaction import _deltas, _finished, _log, _turn_start

    s = create_session(user, "queued")
    script = _turn_start("A", "a") + _deltas("A", 2)
    script += [
        (p.K_USER_MESSAGE, "B", {"client_message_id": "m-B", "text": "b"}),
        (p.K_RUN_QUEUED, "B", {"client_message_id": "m-B"}),
    ]
    script += _deltas("A", 2, 2) + [(p.K_ASSISTANT_MESSAGE, "A", {"text": "a"})]
    script += _finished("A") + [(p.K_RUN_STARTED, "B", {"client_message_id": "m-B"})]
    script += _deltas("B", 5) + [(p.K_ASSISTANT_MESSAGE, "B", {"text": "b"})] + _finished("B")
    _log(s.id, script)
    t0 = timezone.now()
    _finish_runs(s, "A", ago=timedelta(days=30))
    assert apply_retention(now=t0, deltas_days=7).deltas_deleted == 4
    _finish_runs(s, "B", ago=-timedelta(hours=1))  # finished after that pass
    assert apply_retention(now=t0 + timedelta(days=8), deltas_days=7).deltas_deleted == 5
    assert not Event.objects.filter(session=s, kind=p.K_ASSISTANT_DELTA).exists()


async def test_after_a_purge_every_cursor_resumes_to_the_same_transcript(server, cookie, user):
    """A compacting tab at any cursor, inside a purged stretch too, ends with the
    transcript the unpurged log gave; a version 1 tab before the purge is told
    cursor_expired (with earliest and the epoch), never replayed into a hole."""
    s, _ = await database_sync_to_async(build_mixed_log)(user)
    _, full = await _replay(server, cookie, s, 0)
    await database_sync_to_async(_finish_runs)(s, "A", "B", "C", "D")
    await database_sync_to_async(apply_retention)(deltas_days=7)
    s = await database_sync_to_async(AgentSession.objects.get)(id=s.id)
    cases = [full]
    for after in range(0, s.head + 1):
        _, frames = await _replay(server, cookie, s, after, features=["compact"])
        assert _covered(frames) == list(range(after + 1, s.head + 1)), after
        cases.append(full[:after] + frames)
    results = await asyncio.to_thread(_models, cases)
    for after, result in enumerate(results[1:]):
        assert result["model"] == results[0]["model"], f"cursor {after}"
    c = await WsClient.connect(server.ws, cookie)
    expired = await c.resume(s.id, 5, epoch=s.epoch)
    assert expired["reason"] == "cursor_expired"
    assert (expired["earliest"], expired["epoch"]) == (s.compacted_through + 1, s.epoch)
    ok = await c.resume(s.id, s.compacted_through, epoch=s.epoch)
    assert ok["type"] == "resume_ok" and "features" not in ok
    await c.close()


async def test_purge_while_tabs_replay_loses_nothing(server, cookie, user):
    """Tabs resuming (compacted) while the purge runs all end with the full transcript."""
    s, _ = await database_sync_to_async(build_mixed_log)(user)
    _, full = await _replay(server, cookie, s, 0)
    await database_sync_to_async(_finish_runs)(s, "A", "B", "C", "D")
    cursors = [0, 3, 5, 9, 14, 22, 30, 33, 40]
    replays = [_replay(server, cookie, s, after, features=["compact"]) for after in cursors]
    purge = database_sync_to_async(apply_retention, thread_sensitive=False)(deltas_days=7)
    *done, report = await asyncio.gather(*replays, purge)
    assert report.deltas_deleted > 0
    cases = [full] + [
        full[:after] + frames for after, (_, frames) in zip(cursors, done, strict=True)
    ]
    results = await asyncio.to_thread(_models, cases)
    for after, result in zip(cursors, results[1:], strict=True):
        assert result["model"] == results[0]["model"], f"cursor {after}"


def test_idle_sessions_are_deleted_unless_a_run_is_unfinished(user, no_enqueue):
    """Sessions idle past the limit go with their logs; a recent one or one with an
    unfinished run stays."""
    old, busy, recent = (create_session(user, t) for t in ("old", "busy", "recent"))
    Run.objects.create(
        session=busy, client_message_id="m1", text="x", message_seq=2, status=Run.Status.QUEUED
    )
    long_ago = timezone.now() - LONG_AGO
    AgentSession.objects.filter(id__in=[old.id, busy.id]).update(updated_at=long_ago)
    report = apply_retention(sessions_days=7)
    assert report.sessions_deleted == 1
    assert set(AgentSession.objects.values_list("id", flat=True)) == {busy.id, recent.id}
    assert not Event.objects.filter(session_id=old.id).exists()


def test_retention_is_off_by_default(user, settings):
    """With no retention settings nothing is deleted."""
    s, _ = build_mixed_log(user)
    _finish_runs(s, "A", "B", "C", "D")
    AgentSession.objects.filter(id=s.id).update(updated_at=timezone.now() - LONG_AGO)
    assert settings.AGENT_RETAIN_DELTAS_DAYS == 0 and settings.AGENT_RETAIN_SESSIONS_DAYS == 0
    before = _kinds(s.id)
    report = apply_retention()
    assert (report.deltas_deleted, report.sessions_deleted) == (0, 0)
    assert _kinds(s.id) == before


def test_apply_retention_command(user, capsys):
    """manage.py apply_retention applies the policy given on its command line."""
    s, _ = build_mixed_log(user)
    _finish_runs(s, "A", "B", "C", "D")
    call_command("apply_retention", "--deltas-days", "7")
    assert "deleted 13 superseded deltas in 1 sessions" in capsys.readouterr().out


async def test_rotation_sends_open_tabs_through_epoch_mismatch(
    server, cookie, user, django_user_model
):
    """After a rotation in the admin every socket of the session is closed 1013
    (retryable); its resume with the old epoch is epoch_mismatch; from 0 it gets
    the new epoch. Other sessions' sockets are untouched."""
    from tests.runtime.test_runtime import _admin_post

    admin = await database_sync_to_async(django_user_model.objects.create_superuser)(
        "root", password="root-pass-1"
    )
    s = await database_sync_to_async(create_session)(user, "rotate me")
    tabs = [await WsClient.connect(server.ws, cookie) for _ in range(2)]
    for tab in tabs:
        ok = await tab.resume(s.id, 0, features=["compact"])
        assert ok["epoch"] == s.epoch
        await tab.wait(lambda f: f.get("type") == "presence")
    other = await database_sync_to_async(create_session)(user, "untouched")
    bystander = await WsClient.connect(server.ws, cookie)
    await bystander.resume(other.id, 0)
    await asyncio.to_thread(
        _admin_post,
        server,
        admin,
        "/admin/sessions_app/agentsession/",
        {"action": "rotate_epochs", "_selected_action": s.id, "index": "0"},
    )
    for tab in tabs:
        assert await tab.wait_closed() == p.CLOSE_TRY_AGAIN
    epoch = (await database_sync_to_async(AgentSession.objects.get)(id=s.id)).epoch
    assert epoch != s.epoch
    c = await WsClient.connect(server.ws, cookie)
    stale = await c.resume(s.id, 1, epoch=s.epoch)
    assert stale["reason"] == "epoch_mismatch"
    fresh = await c.resume(s.id, 0)
    assert fresh["type"] == "resume_ok" and fresh["epoch"] == epoch
    pong = await bystander.request({"type": "ping"})
    assert pong["type"] == "pong", "other sessions' sockets are untouched"
    await c.close()
    await bystander.close()


async def test_rotation_from_another_process_is_noticed_when_the_head_is_read(server, cookie, user):
    """A rotation whose message cannot reach the server (a command beside an
    embedded server) still closes a socket at its next sync or tail check."""
    s = await database_sync_to_async(create_session)(user, "rotate me")
    tab = await WsClient.connect(server.ws, cookie)
    await tab.resume(s.id, 0)
    await tab.wait(lambda f: f.get("type") == "presence")
    assert await database_sync_to_async(rotate_epoch)(s.id)
    with contextlib.suppress(websockets.ConnectionClosed):
        await tab.send({"type": "sync", "request_id": "r-sync", "after": 0})
    assert await tab.wait_closed() == p.CLOSE_TRY_AGAIN


def test_rotate_epoch_command(user):
    """manage.py rotate_epoch changes the epoch of the sessions named, or of
    every one with --all (after a restore); an unknown id, or none, is an error."""
    from django.core.management.base import CommandError

    s, t = create_session(user), create_session(user)
    call_command("rotate_epoch", s.id)
    assert AgentSession.objects.get(id=s.id).epoch != s.epoch
    assert AgentSession.objects.get(id=t.id).epoch == t.epoch
    with pytest.raises(CommandError):
        call_command("rotate_epoch", "s_nope")
    with pytest.raises(CommandError):
        call_command("rotate_epoch")
    before = dict(AgentSession.objects.values_list("id", "epoch"))
    call_command("rotate_epoch", "--all")
    after = dict(AgentSession.objects.values_list("id", "epoch"))
    assert before.keys() == after.keys() and all(before[k] != after[k] for k in before)


def test_closed_connection_rows_are_pruned(user, transactional_db):
    """Rows of sockets closed longer ago than AGENT_RETAIN_CONNECTIONS_DAYS go;
    open sockets' rows and recent ones stay."""
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.log.retention import apply_retention
    from sessions_app.models import Connection, new_connection_id

    now = timezone.now()
    old = Connection.objects.create(
        id=new_connection_id(), user_id=user.pk, closed_at=now - timedelta(days=40)
    )
    recent = Connection.objects.create(
        id=new_connection_id(), user_id=user.pk, closed_at=now - timedelta(days=1)
    )
    still_open = Connection.objects.create(id=new_connection_id(), user_id=user.pk)
    report = apply_retention(now, connections_days=30)
    assert report.connections_deleted == 1
    left = set(Connection.objects.values_list("id", flat=True))
    assert left == {recent.id, still_open.id} and old.id not in left


def test_a_deleted_session_takes_its_workspace(user, transactional_db, settings, tmp_path):
    """Every path that deletes a session (here retention, the admin's and the
    API's use the same delete) removes its workspace once the delete commits."""
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.log.retention import apply_retention
    from sessions_app.models import AgentSession
    from sessions_app.runtime.tools import workspace_for

    settings.AGENT_WORKSPACES = tmp_path / "ws"
    s = create_session(user)
    kept = create_session(user)
    (workspace_for(s.id) / "notes.txt").write_text("x")
    (workspace_for(kept.id) / "notes.txt").write_text("y")
    AgentSession.objects.filter(id=s.id).update(updated_at=timezone.now() - timedelta(days=9))
    assert apply_retention(sessions_days=5).sessions_deleted == 1
    assert not (tmp_path / "ws" / s.id).exists()
    assert (tmp_path / "ws" / kept.id / "notes.txt").read_text() == "y"
    kept.owner.delete()  # a cascade from the owner
    assert not (tmp_path / "ws" / kept.id).exists()
