"""queries.py: a resume's check, shared only by resumes whose read has not begun."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sessions_app.log.sessions import create_session
from sessions_app.sockets import queries
from sessions_app.wire import protocol as p
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _resume(session, after=0, features=("compact",)):
    frame = {"type": "resume", "protocol": 1, "session_id": session.id, "after": after}
    frame["features"] = list(features)
    if after:
        frame["epoch"] = session.epoch
    return p.parse_resume(frame)


def _check(user, resume) -> asyncio.Future:
    return asyncio.ensure_future(queries.check_resume(user.pk, resume))


def _busy_pool() -> tuple[threading.Event, list]:
    """Every thread of the loop's pool busy until the event is set: what is
    submitted meanwhile queues behind them."""
    busy = threading.Event()
    loop = asyncio.get_running_loop()
    return busy, [loop.run_in_executor(None, busy.wait, 10) for _ in range(64)]


@pytest.fixture
def reads(monkeypatch):
    """Counts the check's reads of the log; ``gate`` holds each read until set."""
    gate = threading.Event()
    gate.set()
    counted = {"n": 0, "gate": gate, "inside": threading.Event()}
    real = queries.read_frames

    def read_frames(*args, **kwargs):
        counted["n"] += 1
        counted["inside"].set()
        gate.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(queries, "read_frames", read_frames)
    return counted


async def test_resumes_queued_together_share_one_read(user, reads):
    """Four tabs resuming one session at one cursor while the pool is busy
    get the same answer from one read, each its own copy of it."""
    session = await asyncio.to_thread(create_session, user, "")
    loop = asyncio.get_running_loop()
    busy = threading.Event()
    # The pool's every thread busy: the checks queue behind it.
    blockers = [loop.run_in_executor(None, busy.wait, 10) for _ in range(64)]
    checks = [_check(user, _resume(session)) for _ in range(4)]
    await asyncio.sleep(0)  # sleep-ok: lets each check reach the queue (no state to wait for)
    busy.set()
    rows = await asyncio.gather(*checks)
    await asyncio.gather(*blockers)
    assert reads["n"] == 1
    assert [r["head"] for r in rows] == [1, 1, 1, 1]
    assert [s for _, s in rows[0]["page"]] == [1]
    assert rows[0]["page"] is not rows[1]["page"]


async def test_a_read_under_way_is_not_shared(user, reads):
    """A resume that arrives once the read has begun (it may have joined
    after the read) gets a read of its own."""
    session = await asyncio.to_thread(create_session, user, "")
    reads["gate"].clear()
    first = asyncio.ensure_future(queries.check_resume(user.pk, _resume(session)))
    await asyncio.to_thread(reads["inside"].wait, 10)
    second = asyncio.ensure_future(queries.check_resume(user.pk, _resume(session)))
    await asyncio.to_thread(wait_for, lambda: reads["n"] >= 2, 10)
    reads["gate"].set()
    await asyncio.gather(first, second)
    assert reads["n"] == 2


async def test_other_arguments_are_other_reads(user, other_user, reads):
    """Another cursor, another feature set or another user never shares: the
    other user's resume is refused, not answered with the owner's row."""
    session = await asyncio.to_thread(create_session, user, "")
    loop = asyncio.get_running_loop()
    busy = threading.Event()
    blockers = [loop.run_in_executor(None, busy.wait, 10) for _ in range(64)]
    mine = asyncio.ensure_future(queries.check_resume(user.pk, _resume(session)))
    plain = asyncio.ensure_future(queries.check_resume(user.pk, _resume(session, features=())))
    theirs = asyncio.ensure_future(queries.check_resume(other_user.pk, _resume(session)))
    await asyncio.sleep(0)  # sleep-ok: lets each check reach the queue (no state to wait for)
    busy.set()
    await asyncio.gather(*blockers)
    assert (await mine)["head"] == 1 and (await plain)["head"] == 1
    with pytest.raises(p.Rejection) as refused:
        await theirs
    assert refused.value.reason == p.R_NOT_FOUND
    assert reads["n"] == 2  # the refused check read no log


async def test_a_sharer_that_leaves_does_not_cancel_the_others(user, reads):
    """The first socket closes while the read is queued: the others still get
    their answer from it (one read)."""
    session = await asyncio.to_thread(create_session, user, "")
    busy, blockers = _busy_pool()
    first, second = _check(user, _resume(session)), _check(user, _resume(session))
    await asyncio.sleep(0)  # sleep-ok: lets both checks reach the queue (no state to wait for)
    first.cancel()
    busy.set()
    await asyncio.gather(*blockers)
    assert (await second)["head"] == 1
    assert first.cancelled() and reads["n"] == 1


async def test_a_refusal_is_shared_too(user, reads, monkeypatch):
    """Two tabs resuming at a cursor past the head are both refused, from one
    read, each with the reason."""
    session = await asyncio.to_thread(create_session, user, "")
    checked = []
    real = queries.check_resume_cursor
    monkeypatch.setattr(queries, "check_resume_cursor", lambda *a: checked.append(a) or real(*a))
    busy, blockers = _busy_pool()
    past = [_check(user, _resume(session, after=5)) for _ in range(2)]
    await asyncio.sleep(0)  # sleep-ok: lets both checks reach the queue (no state to wait for)
    busy.set()
    await asyncio.gather(*blockers)
    for check in past:
        with pytest.raises(p.Rejection) as refused:
            await check
        assert refused.value.reason == p.R_CURSOR_AHEAD
    assert len(checked) == 1
