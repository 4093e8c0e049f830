"""connection_rows.py: the sockets' diagnostic rows are written in batches, in
the order asked, and one bad write fails alone."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from sessions_app.models import Connection
from sessions_app.sockets import rows

pytestmark = pytest.mark.django_db(transaction=True)

_rows = database_sync_to_async(
    lambda: {c.id: c for c in Connection.objects.all()}, thread_sensitive=False
)


@pytest.fixture
def held(monkeypatch):
    """Hold the first batch's write until released; the batches' sizes."""
    started, release = asyncio.Event(), asyncio.Event()
    sizes: list[int] = []
    real = rows._write_in_pool

    async def write(batch):
        sizes.append(len(batch))
        if len(sizes) == 1:
            started.set()
            await release.wait()
        return await real(batch)

    monkeypatch.setattr(rows, "_write_in_pool", write)
    return started, release, sizes


async def test_writes_queued_meanwhile_go_in_one_batch_with_updates_folded_in(user, held):
    """While one write is under way, 50 sockets' inserts, updates and closes
    queue, and all of them are written in one batch, as one row each."""
    started, release, sizes = held
    first = rows.insert("c-first", user_id=user.pk, server_id="srv")
    await started.wait()
    futures = []
    for i in range(50):
        futures.append(rows.insert(f"c{i}", user_id=user.pk, server_id="srv"))
        futures.append(rows.update(f"c{i}", tab_id=f"tab{i}", first_frame_type="resume"))
        if i % 2:
            futures.append(rows.close(f"c{i}", 1000, i, None, {}))
    release.set()
    await asyncio.gather(first, *futures)
    assert sizes == [1, 125]
    got = await _rows()
    assert len(got) == 51
    assert got["c7"].tab_id == "tab7" and got["c7"].close_code == 1000 and got["c7"].clean
    assert got["c7"].last_ack == 7 and got["c7"].closed_at is not None
    assert got["c8"].tab_id == "tab8" and got["c8"].closed_at is None


async def test_updates_and_closes_reach_rows_of_earlier_batches(user):
    """A row inserted in one batch takes later updates and its close; a close
    whose row was never inserted writes the row."""
    await rows.insert("c1", user_id=user.pk, server_id="srv")
    await rows.update("c1", tab_id="t", last_ack=4)
    await rows.close("c1", 4400, 5, None, {})
    await rows.close("c2", 1001, 0, None, {"user_id": user.pk, "server_id": "srv"})
    got = await _rows()
    assert (got["c1"].tab_id, got["c1"].last_ack, got["c1"].close_code) == ("t", 5, 4400)
    assert got["c1"].clean is False
    assert (got["c2"].user_id, got["c2"].close_code, got["c2"].clean) == (user.pk, 1001, True)


async def test_a_bad_write_fails_alone(user, held):
    """An insert that cannot be written (its id is taken) fails its own future;
    the rest of its batch is written."""
    started, release, _ = held
    first = rows.insert("taken", user_id=user.pk, server_id="srv")
    await started.wait()
    dup = rows.insert("taken", user_id=user.pk, server_id="srv")
    others = [rows.insert(f"ok{i}", user_id=user.pk, server_id="srv") for i in range(3)]
    release.set()
    await first
    with pytest.raises(Exception):  # noqa: B017 (the database's own IntegrityError)
        await dup
    await asyncio.gather(*others)
    assert set(await _rows()) == {"taken", "ok0", "ok1", "ok2"}
