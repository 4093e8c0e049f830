"""What each dialect's encoding costs over the native SSE stream
(docs/integrations.md): the same 10k-event replay, and one event live.

Builds a session whose one run streamed 10,000 deltas and then parked at a
gate (so that it is still going: every dialect replays it). Starts the
server (one daphne; a run worker in the production profile) and reads that
run from the log, alternating, ``--repeat`` times each:

- native: ``GET /api/sessions/<id>/stream/?after=0`` to the head;
- AI SDK: ``GET /api/ai-sdk/chat/<id>/stream`` (the reconnect) to ``[DONE]``;
- AG-UI: ``GET /api/ag-ui/<id>/stream`` (a late join) to ``RUN_FINISHED``.

Then each encoder alone, in this process, on the same 10k frames: the cost
of one event live is the cost of one ``logged`` call (the rest of the live
path is shared). Prints medians and the ratios to native.

    .venv/bin/python bench/dialect_replay.py [--deltas 10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
import httpx  # noqa: E402
from common import emit, profile_line, start_servers  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402

from sessions_app.log.events import NewEvent, append_events, read_frames  # noqa: E402
from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import AgentSession, ApprovalRequest, Run  # noqa: E402
from sessions_app.wire import ag_ui, ai_sdk, sse  # noqa: E402
from sessions_app.wire import protocol as p  # noqa: E402
from tests.harness import session_cookie  # noqa: E402


def build(user, deltas: int) -> tuple[str, str, int]:
    """The session, its parked run, and its head (built once per database)."""
    title = f"dialects {deltas}"
    done = AgentSession.objects.filter(owner=user, title=title).first()
    if done:
        return done.id, Run.objects.get(session_id=done.id).id, done.head
    session = create_session(user, title)
    run = Run.objects.create(
        session=session,
        client_message_id="m1",
        text=f"/stream {deltas} 0",
        message_seq=session.head + 1,
        status=Run.Status.AWAITING_APPROVAL,
    )
    gate = ApprovalRequest.objects.create(
        session=session, run=run, tool_call_id="call_bench", tool="write_file", args={"path": "x"}
    )
    call = {"tool_call_id": gate.tool_call_id, "tool": gate.tool, "args": gate.args}
    text = "".join(f"tok{i} " for i in range(deltas))
    events = [
        NewEvent(p.K_USER_MESSAGE, {"client_message_id": "m1", "text": run.text}, run.id),
        NewEvent(p.K_RUN_STARTED, {"client_message_id": "m1"}, run.id),
        *(NewEvent(p.K_ASSISTANT_DELTA, {"text": f"tok{i} "}, run.id) for i in range(deltas)),
        NewEvent(p.K_ASSISTANT_MESSAGE, {"text": text}, run.id),
        NewEvent(p.K_TOOL_CALL, call, run.id),
        NewEvent(p.K_APPROVAL_REQUESTED, {"approval_id": gate.id, **call}, run.id),
        NewEvent(
            p.K_RUN_PAUSED,
            {"stop_reason": p.STOP_REQUIRES_APPROVAL, "approval_id": gate.id},
            run.id,
        ),
    ]
    for at in range(0, len(events), 2000):
        with transaction.atomic():
            append_events(session.id, events[at : at + 2000])
    return session.id, run.id, AgentSession.objects.get(id=session.id).head


def read(client: httpx.Client, url: str, end: str, params=None) -> tuple[float, int]:
    """Milliseconds from the request to the chunk holding ``end``, and bytes."""
    t0 = time.perf_counter()
    received = 0
    with client.stream("GET", url, params=params) as response:
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}: {response.read()!r}")
        tail = ""
        for chunk in response.iter_text():
            received += len(chunk)
            if end in tail + chunk:
                return (time.perf_counter() - t0) * 1e3, received
            tail = chunk[-200:]
    raise SystemExit(f"{url} ended before {end!r}")


def encoders_alone(sid: str, run_id: str, head: int, rounds: int = 5) -> dict[str, float]:
    """Microseconds per event of each encoder's ``logged``, on the run's frames."""
    frames = []
    after = 0
    while after < head:
        page = read_frames(sid, after, head, 5000)
        frames += page
        after = page[-1][1]
    makers = {
        "native": lambda: sse.NativeEncoder(),
        "ai_sdk": lambda: ai_sdk.UiMessageStream(sid, run_id, stop_at_gate=False),
        "ag_ui": lambda: ag_ui.AgUiRun(sid, "r", run_id, "e"),
    }
    out: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(rounds):
        for name, make in makers.items():
            encoder = make()
            encoder.opening(sid, "e", head)
            t0 = time.perf_counter()
            for text, seq in frames:
                encoder.logged(text, seq)
            out[name].append((time.perf_counter() - t0) * 1e6 / len(frames))
    return {name: statistics.median(values) for name, values in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench-dialects")
    sid, run_id, head = build(user, args.deltas)
    log_dir = Path(tempfile.mkdtemp(prefix="agent-bench-dialects-"))
    server, procs = start_servers(log_dir, AGENT_TEST_HOOKS="0")
    name, value = session_cookie(user).split("=", 1)
    print(profile_line())
    reads = {
        "native": (f"/api/sessions/{sid}/stream/", f"id: {head}\n", {"after": 0}),
        "ai_sdk": (f"/api/ai-sdk/chat/{sid}/stream", "data: [DONE]", None),
        "ag_ui": (f"/api/ag-ui/{sid}/stream", '"RUN_FINISHED"', None),
    }
    rows: dict[str, list[tuple[float, int]]] = {k: [] for k in reads}
    try:
        with httpx.Client(base_url=server.http, cookies={name: value}, timeout=120) as client:
            for path, end, params in reads.values():
                read(client, path, end, params)  # warm: imports, pools, caches
            for _ in range(args.repeat):
                for kind, (path, end, params) in reads.items():
                    rows[kind].append(read(client, path, end, params))
    finally:
        for proc in procs:
            proc.stop()
    ms = {k: statistics.median(r[0] for r in v) for k, v in rows.items()}
    kib = {k: statistics.median(r[1] for r in v) / 1024 for k, v in rows.items()}
    alone = encoders_alone(sid, run_id, head)
    print(f"replay of one run, {head} events, median of {args.repeat} (alternating):")
    for kind in reads:
        print(
            f"  {kind:7} {ms[kind]:7.0f} ms  {kib[kind]:6.0f} KiB  x{ms[kind] / ms['native']:.2f}"
            f"  | encoder alone {alone[kind]:5.2f} us/event  x{alone[kind] / alone['native']:.2f}"
        )
    emit(
        "dialect_replay",
        events=head,
        native_ms=ms["native"],
        ai_sdk_ms=ms["ai_sdk"],
        ag_ui_ms=ms["ag_ui"],
        ai_sdk_ratio=ms["ai_sdk"] / ms["native"],
        ag_ui_ratio=ms["ag_ui"] / ms["native"],
        native_us_per_event=alone["native"],
        ai_sdk_us_per_event=alone["ai_sdk"],
        ag_ui_us_per_event=alone["ag_ui"],
    )


if __name__ == "__main__":
    main()
