"""Opening a long session in a browser tab: fresh (nothing cached) and refreshed.

Builds sessions of about 1k, 10k and 100k events made of ``/stream 100 0``
turns (a user message, run.started, 100 deltas, the message, run.finished),
starts the server (one daphne; a run worker in the production profile), and
opens each session in Debian's Chromium:

- fresh: a new browser context (empty sessionStorage), until the transcript's
  ``data-cursor`` is the head and the tab is live, the transcript checked
  complete (every turn's text, the last one exact);
- refresh: the same page reloaded (its cache), until the same.

With ``--branched`` every turn's answer is regenerated once (two sibling
answers) and every fifth message is edited (a second version of it, with its
own answer, on which the conversation goes on): about 230 events a turn, of
which the tab shows the active path, one answer a turn.

It prints, per size, the median of ``--repeat`` opens: the time from
navigation start to caught up, the bytes of WebSocket frames received, and the
longest main-thread task (the Long Tasks API; "<50" when none was that long).

    .venv/bin/python bench/fresh_open.py                      # embedded profile
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentbench \\
    REDIS_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/fresh_open.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import django_setup  # noqa: E402, F401 (sets up Django)
from common import emit, profile_line, start_servers  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from sessions_app.log.events import NewEvent, append_events  # noqa: E402
from sessions_app.log.sessions import create_session  # noqa: E402
from sessions_app.models import AgentSession, Run  # noqa: E402
from sessions_app.wire import protocol as p  # noqa: E402
from tests.harness import session_cookie  # noqa: E402
from tests.logs_made import session_with_turns  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TURN_DELTAS = 100
TURN_EVENTS = TURN_DELTAS + 4

# Installed in every page before its scripts: when the cursor last changed,
# and the longest task the main thread ran.
PROBE_JS = """
(() => {
  window.__probe = { cursorAt: 0, longest: 0 };
  new PerformanceObserver((list) => {
    const probe = window.__probe;
    for (const e of list.getEntries()) probe.longest = Math.max(probe.longest, e.duration);
  }).observe({ type: "longtask", buffered: true });
  new MutationObserver(() => { window.__probe.cursorAt = performance.now(); })
    .observe(document, { subtree: true, attributes: true, attributeFilter: ["data-cursor"] });
})();
"""

CAUGHT_UP_JS = """head => {
  const t = document.querySelector("[data-testid=transcript]");
  const s = document.querySelector("[data-testid=connection-state]");
  return t && s && Number(t.dataset.cursor) === head && s.dataset.state === "live";
}"""


def build_session(user, turns: int) -> tuple[str, int]:
    """A session of ``turns`` finished /stream turns; returns its id and head
    (one built before in the same database is used again: ``bench/ab.py``
    keeps a database across the rounds and sides of a comparison)."""
    done = AgentSession.objects.filter(
        owner=user, title=f"{turns} turns", head=1 + turns * TURN_EVENTS
    ).first()
    if done:
        return done.id, done.head
    session = session_with_turns(
        user,
        turns,
        f"{turns} turns",
        question=lambda t: f"/stream {TURN_DELTAS} 0",
        answer=lambda t: [f"tok{i} " for i in range(TURN_DELTAS)],
        streamed=True,
    )
    return session.id, session.head


def _turn_events(run: Run, first: NewEvent | None, started: dict) -> list[NewEvent]:
    text = "".join(f"tok{i} " for i in range(TURN_DELTAS))
    return [
        *([first] if first else []),
        NewEvent(p.K_RUN_STARTED, started, run.id),
        *(NewEvent(p.K_ASSISTANT_DELTA, {"text": f"tok{i} "}, run.id) for i in range(100)),
        NewEvent(p.K_ASSISTANT_MESSAGE, {"text": text}, run.id),
        NewEvent(p.K_RUN_FINISHED, {"stop_reason": p.STOP_END_TURN}, run.id),
    ]


def build_branched_session(user, turns: int) -> tuple[str, int]:
    """A session of ``turns`` turns with many branches (see the module's
    comment); the active path is one answer a turn. Returns its id and head."""
    session = create_session(user, f"{turns} branched turns")
    now = timezone.now()
    leaf = None
    text = f"/stream {TURN_DELTAS} 0"

    def run(cmid: str, message_seq: int, **tree) -> Run:
        return Run.objects.create(
            session=session,
            client_message_id=cmid,
            text=text,
            message_seq=message_seq,
            status=Run.Status.FINISHED,
            stop_reason=p.STOP_END_TURN,
            started_at=now,
            finished_at=now,
            parent_id=leaf,
            **tree,
        )

    def append(events: list[NewEvent]) -> None:
        with transaction.atomic():
            append_events(session.id, events)
        session.head += len(events)

    for t in range(turns):
        first = run(f"m{t}", session.head + 1)
        message = NewEvent(p.K_USER_MESSAGE, {"client_message_id": f"m{t}", "text": text}, first.id)
        append(_turn_events(first, message, {"client_message_id": f"m{t}"}))
        again = run(f"g{t}", first.message_seq, answers_id=first.id)
        regenerated = {"client_message_id": f"g{t}", "regenerates": first.id, "parent_run_id": leaf}
        append(_turn_events(again, None, regenerated))
        last = again
        if t % 5 == 4:
            edited = run(f"e{t}", session.head + 1)
            data = {"client_message_id": f"e{t}", "text": text, "edits": first.id}
            message = NewEvent(p.K_USER_MESSAGE, {**data, "parent_run_id": leaf}, edited.id)
            append(_turn_events(edited, message, {"client_message_id": f"e{t}"}))
            last = edited
        leaf = last.id
    AgentSession.objects.filter(id=session.id).update(leaf_run_id=leaf)
    return session.id, AgentSession.objects.get(id=session.id).head


def open_once(page, url: str, head: int, turns: int, received: list[int], reload=False):
    received.clear()
    if reload:
        page.reload()
    else:
        page.goto(url)
    page.wait_for_function(CAUGHT_UP_JS, arg=head, timeout=120_000, polling=50)
    probe = page.evaluate("() => window.__probe")
    texts = page.eval_on_selector_all(
        "[data-testid=assistant-message]",
        "els => els.filter(e => !e.hidden).map(e => e.textContent)",
    )
    want = "".join(f"tok{i} " for i in range(TURN_DELTAS))
    assert len(texts) == turns and texts[-1].endswith(want), (len(texts), texts[-1][-80:])
    return probe["cursorAt"], sum(received), probe["longest"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="10,96,962", help="turns per session (104 events each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--branched", action="store_true", help="regenerates and edits (default turns 4,42,430)"
    )
    args = parser.parse_args()
    if args.branched and args.turns == parser.get_default("turns"):
        args.turns = "4,42,430"
    build = build_branched_session if args.branched else build_session
    from playwright.sync_api import sync_playwright

    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench-open")
    sizes = [int(x) for x in args.turns.split(",")]
    built = []
    for turns in sizes:
        began = time.monotonic()
        sid, head = build(user, turns)
        built.append((turns, sid, head))
        print(f"built {head} events in {time.monotonic() - began:.1f} s", flush=True)
    log_dir = Path(tempfile.mkdtemp(prefix="agent-bench-open-"))
    server, procs = start_servers(log_dir, AGENT_TEST_HOOKS="0")
    cookie = session_cookie(user)
    name, value = cookie.split("=", 1)
    print(profile_line())
    print(f"{'events':>8} {'open':>7} {'ms':>8} {'KiB recv':>9} {'longest task ms':>16}")
    figures: dict[str, float] = {}  # the largest session's (the last one's)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM)
            for turns, sid, head in built:
                url = f"{server.http}/s/{sid}/"
                rows: dict[str, list[tuple[float, int, float]]] = {"fresh": [], "refresh": []}
                for _ in range(args.repeat):
                    context = browser.new_context()
                    context.add_cookies(
                        [{"name": name, "value": value, "url": server.http, "httpOnly": True}]
                    )
                    context.add_init_script(PROBE_JS)
                    page = context.new_page()
                    received: list[int] = []
                    page.on(
                        "websocket",
                        lambda ws, received=received: ws.on(
                            "framereceived", lambda data: received.append(len(data))
                        ),
                    )
                    rows["fresh"].append(open_once(page, url, head, turns, received))
                    rows["refresh"].append(open_once(page, url, head, turns, received, reload=True))
                    context.close()
                for kind, values in rows.items():
                    ms = statistics.median(v[0] for v in values)
                    figures[f"{kind}_ms"] = ms
                    kib = statistics.median(v[1] for v in values) / 1024
                    longest = max(v[2] for v in values)
                    task = f"{longest:.0f}" if longest else "<50"
                    print(f"{head:>8} {kind:>7} {ms:>8.0f} {kib:>9.0f} {task:>16}", flush=True)
            browser.close()
    finally:
        for proc in procs:
            proc.stop()
    emit("fresh_open", events=built[-1][2], **figures)


if __name__ == "__main__":
    main()
