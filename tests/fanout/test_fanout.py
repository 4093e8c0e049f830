"""fanout: a busy publisher merges each session's queued events, in order."""

from __future__ import annotations

from sessions_app import fanout


def _event(sid: str, seq: int) -> tuple[str, dict]:
    return (
        fanout.group_name(sid),
        {"type": fanout.EVENT_MESSAGE, "session_id": sid, "seq": seq, "text": f"{sid}{seq}"},
    )


def test_merge_keeps_each_sessions_order_and_separates_presence():
    """Queued events of one session become one session.events in seq order; a presence
    between them splits the run; another session's events stay apart."""
    presence = (fanout.group_name("a"), {"type": fanout.PRESENCE_MESSAGE, "session_id": "a"})
    batch = [_event("a", 1), _event("b", 7), _event("a", 2), presence, _event("a", 3)]
    merged = dict(fanout.merge(batch))
    assert merged[fanout.group_name("a")] == [
        {"type": fanout.EVENTS_MESSAGE, "session_id": "a", "events": [[1, "a1"], [2, "a2"]]},
        presence[1],
        {"type": fanout.EVENT_MESSAGE, "session_id": "a", "seq": 3, "text": "a3"},
    ]
    assert merged[fanout.group_name("b")] == [batch[1][1]]


def test_a_lone_event_is_published_as_itself():
    """With nothing else queued, an event goes out as a plain session.event."""
    ((group, messages),) = fanout.merge([_event("a", 5)])
    assert messages == [_event("a", 5)[1]]


def test_flush_returns_once_everything_published_was_sent(monkeypatch):
    """A stopping worker's flush waits until each queued publication reached the
    channel layer, so its last events go out before the process exits."""
    import asyncio
    import threading

    sent: list[int] = []
    gate = threading.Event()

    async def slow_send(layer, group, messages):
        await asyncio.get_running_loop().run_in_executor(None, gate.wait)
        for m in messages:
            sent.extend([m["seq"]] if "seq" in m else [seq for seq, _ in m["events"]])

    monkeypatch.setattr(fanout, "send_group", slow_send)
    monkeypatch.setattr(fanout, "get_channel_layer", lambda: None)
    publisher = fanout._Publisher()
    for seq in (1, 2, 3):
        publisher.publish(*_event("a", seq))
    assert publisher.flush(timeout=0.2) is False  # still sending
    gate.set()
    assert publisher.flush(timeout=10) is True
    assert sent == [1, 2, 3]
