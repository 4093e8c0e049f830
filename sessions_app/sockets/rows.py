"""The sockets' diagnostic ``Connection`` rows, written in batches.

A socket's row is never on its path: the handshake answers before it is
written, and only presence (which counts open rows), the close and a test
wait for it. Written one at a time, the rows cost every socket three pool
calls and three commits over its life (the insert at the upgrade, what its
handshake asked for, the close), and in a reconnect storm those thousands of
small transactions compete with the resumes for the database pool, the
database's single writer (SQLite) and the GIL.

So the row writes of a process queue here, in the order the sockets made
them, and one writer at a time takes everything queued and writes it in one
transaction on the socket pool: the more sockets arrive together, the bigger
the batch. Nothing waits on a timer, so a lone socket's row is written at
once. Within a batch, a row's insert absorbs its later updates (one INSERT),
and the rows are inserted in one statement. If the batch's transaction
fails, each write is tried alone, so one bad write fails only its own
future.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from sessions_app.fanout.presence import request_presence
from sessions_app.models import Connection
from sessions_app.server.db_pool import in_db_pool
from sessions_app.wire import protocol as p

log = logging.getLogger(__name__)

INSERT, UPDATE, CLOSE = "insert", "update", "close"


@dataclass
class _Write:
    op: str
    connection_id: str
    fields: dict[str, Any]
    future: asyncio.Future
    # CLOSE only: the row's opening fields, should its insert have failed.
    opened: dict[str, Any] = field(default_factory=dict)
    presence_for: str | None = None


def closed_fields(code: int, last_ack: int) -> dict[str, Any]:
    """What a row records of its socket's close."""
    return {
        "closed_at": timezone.now(),
        "close_code": code,
        "clean": code in (p.CLOSE_NORMAL, p.CLOSE_GOING_AWAY, p.CLOSE_SERVICE_RESTART),
        "last_ack": last_ack or None,
    }


def _apply(writes: list[_Write]) -> None:
    """Write ``writes`` in order (in the caller's transaction): inserts first,
    each with its updates and close of this batch folded in, then the updates
    and closes of rows inserted by earlier batches."""

    inserts: dict[str, dict[str, Any]] = {}
    rest: list[_Write] = []
    for w in writes:
        if w.op == INSERT:
            inserts[w.connection_id] = dict(w.fields)
        elif w.connection_id in inserts:
            inserts[w.connection_id].update(w.fields)
        else:
            rest.append(w)
    if inserts:
        Connection.objects.bulk_create(
            [Connection(id=cid, **fields) for cid, fields in inserts.items()]
        )
    for w in rest:
        updated = Connection.objects.filter(id=w.connection_id).update(**w.fields)
        if not updated and w.op == CLOSE:
            # Its insert failed (it is recorded at its close, so the admin
            # still shows the socket).
            Connection.objects.create(id=w.connection_id, **w.opened, **w.fields)


def _write_batch(writes: list[_Write]) -> list[BaseException | None]:
    """Write a batch in one transaction; if that fails, each write alone.
    Returns each write's error (None: written)."""

    try:
        with transaction.atomic():
            _apply(writes)
        errors: list[BaseException | None] = [None] * len(writes)
    except Exception:
        log.warning("connection rows: a batch of %d failed; writing each alone", len(writes))
        errors = []
        for w in writes:
            try:
                with transaction.atomic():
                    _apply([w])
                errors.append(None)
            except Exception as exc:
                errors.append(exc)
    for w, error in zip(writes, errors, strict=True):
        if error is None and w.presence_for:
            # Its other sockets learn it left (coalesced by presence.py).
            request_presence(w.presence_for)
    return errors


_write_in_pool = in_db_pool(_write_batch)


class RowWriter:
    """The queue of one event loop's row writes; see the module docstring."""

    def __init__(self) -> None:
        self.queue: list[_Write] = []
        self.writing: asyncio.Task | None = None

    def submit(self, write: _Write) -> asyncio.Future:
        self.queue.append(write)
        if self.writing is None:
            self.writing = asyncio.ensure_future(self._drain())
        return write.future

    async def _drain(self) -> None:
        try:
            while self.queue:
                batch, self.queue = self.queue, []
                try:
                    errors = await _write_in_pool(batch)
                except asyncio.CancelledError:
                    for w in batch + self.queue:
                        w.future.cancel()
                    self.queue = []  # cancelled: not written later either
                    raise
                except Exception as exc:  # the pool itself failed
                    errors = [exc] * len(batch)
                for w, error in zip(batch, errors, strict=True):
                    if w.future.done():
                        continue
                    if error is None:
                        w.future.set_result(None)
                    else:
                        w.future.set_exception(error)
        finally:
            self.writing = None


_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RowWriter] = (
    weakref.WeakKeyDictionary()
)


def writer() -> RowWriter:
    """The running loop's writer."""
    loop = asyncio.get_running_loop()
    w = _writers.get(loop)
    if w is None:
        w = _writers[loop] = RowWriter()
    return w


async def flush() -> None:
    """Wait until the running loop's queued row writes are written (a server
    that is stopping)."""
    w = _writers.get(asyncio.get_running_loop())
    while w is not None and w.writing is not None:
        await asyncio.shield(w.writing)


def _submit(op: str, connection_id: str, fields: dict[str, Any], **extra: Any) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    # A write nobody awaits must not log "exception never retrieved" twice:
    # the consumer logs the failures it cares about.
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return writer().submit(_Write(op, connection_id, fields, future, **extra))


def insert(connection_id: str, **fields: Any) -> asyncio.Future:
    """Queue a new socket's row; the future resolves once it is written."""
    return _submit(INSERT, connection_id, fields)


def update(connection_id: str, **fields: Any) -> asyncio.Future:
    """Queue more of a socket's row (its handshake, its last ack)."""
    return _submit(UPDATE, connection_id, fields)


def close(
    connection_id: str,
    code: int,
    last_ack: int,
    presence_for: str | None,
    opened: dict[str, Any],
) -> asyncio.Future:
    """Queue a socket's close (its row is written here if its insert failed);
    once written, its session's other sockets are told it left."""
    return _submit(
        CLOSE,
        connection_id,
        closed_fields(code, last_ack),
        opened=opened,
        presence_for=presence_for,
    )
