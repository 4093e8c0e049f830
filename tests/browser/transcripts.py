"""What a tab shows against what the server's log says: the transcript read
from the DOM, the one expected from the log, and the assertions that compare
them (re-exported by ``helpers``)."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Page

from sessions_app.log.events import read_events
from sessions_app.models import AgentSession


def rendered_seqs(page: Page) -> list[int]:
    """The data-seq of every rendered transcript item, in DOM order."""
    return page.eval_on_selector_all(
        "[data-testid=transcript] [data-seq]", "els => els.map(e => Number(e.dataset.seq))"
    )


# An assistant element's text as written (its Markdown source), provided what
# it shows is exactly a fresh rendering of that text: a stale or doubled
# rendering turns into a visible mismatch in the comparisons.
SHOWN_TEXT_JS = """
(el) => {
  if (!el.markdown) return "NOT RENDERED: " + el.textContent;
  const probe = document.createElement("div");
  new el.markdown.constructor(document, probe).render(el.sourceText);
  if (el.markdown.text !== el.sourceText || probe.innerHTML !== el.markdown.container.innerHTML) {
    return "RENDERING DIFFERS FROM THE TEXT: " + el.textContent;
  }
  return el.sourceText;
}
"""


def assistant_texts(page: Page) -> list[str]:
    """Each assistant message's text as the log has it, checked against what
    the element shows (SHOWN_TEXT_JS; Markdown itself: test_markdown.py)."""
    return page.eval_on_selector_all(
        "[data-testid=assistant-message]", f"els => els.map({SHOWN_TEXT_JS})"
    )


def transcript_text(page: Page) -> str:
    return page.get_by_test_id("transcript").inner_text()


TRANSCRIPT_JS = (
    r"""
() => {
  const shown = """
    + SHOWN_TEXT_JS
    + r""";
  const t = document.querySelector("[data-testid=transcript]");
  // What the tab shows: the rows of the active path (the others are hidden).
  const rows = Array.from(t.querySelectorAll(":scope > [data-seq]")).filter((el) => !el.hidden);
  const items = rows.map((el) => {
    const d = el.dataset;
    const kind = d.testid || "note";
    const item = { seq: Number(d.seq), kind };
    const text = el.textContent;
    if (kind === "note") item.text = text;
    else if (kind === "user-message") {
      Object.assign(item, { cmid: d.clientMessageId, run: d.runId, text });
    } else if (kind === "assistant-message") {
      Object.assign(item, { run: d.runId, final: d.final === "true", text: shown(el) });
    } else if (kind === "tool-call") {
      Object.assign(item, { run: d.runId, call: d.toolCallId, tool: d.tool });
    } else if (kind === "approval") {
      const by = el.querySelector("[data-testid=approval-decision]").dataset.decidedBy;
      Object.assign(item, { run: d.runId, approval: d.approvalId, status: d.status });
      item.decided_by = by || null;
    } else if (kind === "tool-result") {
      Object.assign(item, { run: d.runId, call: d.toolCallId, ok: d.ok === "true" });
    } else if (kind === "run-notice") {
      Object.assign(item, { run: d.runId, stop: d.stopReason });
    } else if (kind === "run-resumed") {
      Object.assign(item, { run: d.runId, reason: d.reason });
    }
    return item;
  });
  return { session: t.dataset.sessionId, cursor: Number(t.dataset.cursor), items };
}
"""
)


def transcript(page: Page) -> dict[str, Any]:
    """One consistent snapshot of the rendered transcript: its cursor and items."""
    return page.evaluate(TRANSCRIPT_JS)


# --- the server's truth -----------------------------------------------------------------


def head(session_id: str) -> int:
    return AgentSession.objects.get(id=session_id).head


def log(session_id: str):
    return read_events(session_id, 0)


def log_kinds(session_id: str) -> list[str]:
    return [e.kind for e in log(session_id)]


def events_of(session_id: str, kind: str) -> list:
    return [e for e in log(session_id) if e.kind == kind]


def expected_transcript(session_id: str, upto: int | None = None) -> dict[str, Any]:
    """What a tab must show after applying the session's log up to ``upto``:
    one item per row, the way the protocol defines the events (a run's text
    between tool calls is one assistant element, deltas appended, the final
    message replacing them; notices for runs that did not end normally), of
    the active path only (docs/protocol.md, "Branches")."""
    items: list[dict[str, Any]] = []
    segment: dict[str, int] = {}  # run -> index of its current text element
    last_of_run: dict[str, int] = {}
    resumed_noted: set[str] = set()
    users: set[str] = set()
    approvals: dict[str, int] = {}
    last = 0
    # The tree: run -> (parent, the run whose message it answers); the leaf.
    tree: dict[str, tuple[str | None, str]] = {}
    leaf: str | None = None

    def add(item: dict[str, Any]) -> int:
        items.append(item)
        if item.get("run"):
            last_of_run[item["run"]] = len(items) - 1
        return len(items) - 1

    def text_element(event) -> dict[str, Any]:
        run = event.run_id or ""
        index = segment.get(run)
        if index is not None and last_of_run.get(run) == index and not items[index]["final"]:
            return items[index]
        item = {"seq": event.seq, "kind": "assistant-message", "run": run, "final": False}
        item["text"] = ""
        segment[run] = add(item)
        return item

    for e in read_events(session_id, 0, upto):
        last, d, run = e.seq, e.data, e.run_id or ""
        if e.kind == "session.created":
            add({"seq": e.seq, "kind": "note", "text": "Session started"})
        elif e.kind == "user.message":
            if d["client_message_id"] in users:
                continue
            users.add(d["client_message_id"])
            if run not in tree:
                tree[run] = (d.get("parent_run_id", leaf), run)
                leaf = run
            add(
                {
                    "seq": e.seq,
                    "kind": "user-message",
                    "cmid": d["client_message_id"],
                    "run": run,
                    "text": d["text"],
                }
            )
        elif e.kind in ("run.started", "run.queued") and "regenerates" in d:
            if run not in tree and d["regenerates"] in tree:
                tree[run] = (d.get("parent_run_id"), tree[d["regenerates"]][1])
                leaf = run
        elif e.kind == "branch.switched":
            if d["leaf_run_id"] in tree:
                leaf = d["leaf_run_id"]
        elif e.kind == "assistant.delta":
            text_element(e)["text"] += d["text"]
        elif e.kind == "run.resumed":
            # The open text is cut back to the checkpoint; one quiet note a
            # run, which does not end the run's text element.
            index = segment.get(run)
            if index is not None and last_of_run.get(run) == index and not items[index]["final"]:
                items[index]["text"] = items[index]["text"][: d["keep"]]
            if run not in resumed_noted:
                resumed_noted.add(run)
                items.append(
                    {"seq": e.seq, "kind": "run-resumed", "run": run, "reason": d["reason"]}
                )
        elif e.kind == "assistant.message":
            item = text_element(e)
            item["text"], item["final"] = d["text"], True
        elif e.kind == "tool.call":
            add(
                {
                    "seq": e.seq,
                    "kind": "tool-call",
                    "run": run,
                    "call": d["tool_call_id"],
                    "tool": d["tool"],
                }
            )
        elif e.kind == "approval.requested":
            if d["approval_id"] in approvals:
                continue
            approvals[d["approval_id"]] = add(
                {
                    "seq": e.seq,
                    "kind": "approval",
                    "run": run,
                    "approval": d["approval_id"],
                    "status": "pending",
                    "decided_by": None,
                }
            )
        elif e.kind == "approval.decided":
            index = approvals.get(d["approval_id"])
            if index is not None:
                status = {
                    "approve": "approved",
                    "edit": "edited",
                    "respond": "answered",
                    "expired": "expired",
                    "cancelled": "cancelled",
                }.get(d["decision"], "denied")
                items[index].update(status=status, decided_by=d["decided_by"])
        elif e.kind == "tool.result":
            add(
                {
                    "seq": e.seq,
                    "kind": "tool-result",
                    "run": run,
                    "call": d["tool_call_id"],
                    "ok": d["ok"] is True,
                }
            )
        elif e.kind == "run.finished":
            index = segment.get(run)
            if index is not None:
                items[index]["final"] = True
            if d["stop_reason"] != "end_turn":
                add({"seq": e.seq, "kind": "run-notice", "run": run, "stop": d["stop_reason"]})
    path: set[str] = set()
    answered: set[str] = set()
    node = leaf
    while node is not None and node in tree and node not in path:
        path.add(node)
        answered.add(tree[node][1])
        node = tree[node][0]

    def shown(item: dict[str, Any]) -> bool:
        if not item.get("run") or not path:
            return True
        return item["run"] in (answered if item["kind"] == "user-message" else path)

    return {"session": session_id, "cursor": last, "items": [i for i in items if shown(i)]}


def assert_shows_log(page: Page, session_id: str) -> dict[str, Any]:
    """The tab shows exactly the session's whole log (wait for it with settle)."""
    shown = transcript(page)
    expected = expected_transcript(session_id)
    assert shown == expected, _diff(shown, expected)
    return shown


def assert_same_transcript(*pages: Page) -> None:
    """Every tab shows the same items, seqs and text."""
    first = pages[0]
    for other in pages[1:]:
        assert transcript(other) == transcript(first)
        assert rendered_seqs(other) == rendered_seqs(first)
        assert transcript_text(other) == transcript_text(first)


def _diff(shown: dict[str, Any], expected: dict[str, Any]) -> str:
    lines = [f"cursor shown {shown['cursor']} expected {expected['cursor']}"]
    for i in range(max(len(shown["items"]), len(expected["items"]))):
        a = shown["items"][i] if i < len(shown["items"]) else None
        b = expected["items"][i] if i < len(expected["items"]) else None
        if a != b:
            lines.append(f"item {i}: shown {json.dumps(a)}\n        expected {json.dumps(b)}")
    return "\n".join(lines)
