import assert from "node:assert/strict";
import { test } from "node:test";

import { activeRun, applyEvent, emptyModel, hasUserMessage, isModel, queuedRuns } from "../../static/sessions_app/js/model/transcript.js";
import { ev } from "./helpers.mjs";

function build(events) {
  const model = emptyModel();
  const changes = [];
  for (const e of events) changes.push(...applyEvent(model, e));
  return { model, changes };
}

const user = (seq, cmid, text, run) => ev(seq, "user.message", { client_message_id: cmid, text }, run);

test("deltas are appended in place; equal deltas both count; the final message replaces", () => {
  const { model, changes } = build([
    ev(1, "session.created", { title: "T" }, null),
    user(2, "m-1", "hi", "run_1"),
    ev(3, "run.started", { client_message_id: "m-1" }),
    ev(4, "assistant.delta", { text: "tok " }),
    ev(5, "assistant.delta", { text: "tok " }),
    ev(6, "assistant.message", { text: "tok tok" }),
    ev(7, "run.finished", { stop_reason: "end_turn" }),
  ]);
  assert.equal(model.title, "T");
  const a = model.items.filter((i) => i.type === "assistant");
  assert.equal(a.length, 1);
  assert.equal(a[0].seq, 4, "the row carries the seq of the event that created it");
  assert.equal(a[0].text, "tok tok");
  assert.equal(a[0].final, true);
  assert.deepEqual(
    changes.filter((c) => c.op === "append").map((c) => c.text),
    ["tok "],
  );
  assert.ok(hasUserMessage(model, "m-1"));
  assert.equal(activeRun(model), null);
  assert.ok(isModel(JSON.parse(JSON.stringify(model))), "survives a JSON round-trip");
});

test("tool call, approval and result; the decision updates the card in place", () => {
  const { model } = build([
    user(1, "m-1", "/write a.txt hi", "run_1"),
    ev(2, "run.started", { client_message_id: "m-1" }),
    ev(3, "tool.call", { tool_call_id: "c1", tool: "write_file", args: { path: "a.txt", text: "hi" } }),
    ev(4, "approval.requested", { approval_id: "ap1", tool_call_id: "c1", tool: "write_file", args: { path: "a.txt" } }),
    ev(5, "run.paused", { stop_reason: "requires_approval", approval_id: "ap1" }),
  ]);
  assert.deepEqual(activeRun(model), { runId: "run_1", status: "awaiting_approval" });
  const card = model.items.find((i) => i.type === "approval");
  assert.equal(card.status, "pending");
  const changes = applyEvent(model, ev(6, "approval.decided", { approval_id: "ap1", decision: "approve", decided_by: "alice" }));
  assert.deepEqual(
    changes.map((c) => c.op),
    ["update"],
  );
  assert.equal(card.status, "approved");
  assert.equal(card.decidedBy, "alice");
  applyEvent(model, ev(7, "tool.result", { tool_call_id: "c1", ok: true, output: "wrote" }));
  applyEvent(model, ev(8, "assistant.delta", { text: "Done" }));
  applyEvent(model, ev(9, "assistant.message", { text: "Done." }));
  applyEvent(model, ev(10, "run.finished", { stop_reason: "end_turn" }));
  assert.deepEqual(
    model.items.map((i) => i.type),
    ["user", "tool", "approval", "result", "assistant"],
  );
  assert.equal(model.items.at(-1).text, "Done.");
});

test("text before and after a tool call are separate segments of the run", () => {
  const { model } = build([
    user(1, "m-1", "x", "run_1"),
    ev(2, "assistant.delta", { text: "Let me check. " }),
    ev(3, "tool.call", { tool_call_id: "c1", tool: "terminal", args: { command: "ls" } }),
    ev(4, "tool.result", { tool_call_id: "c1", ok: true, output: "a" }),
    ev(5, "assistant.delta", { text: "Found a" }),
    ev(6, "assistant.message", { text: "Found a." }),
  ]);
  const a = model.items.filter((i) => i.type === "assistant");
  assert.deepEqual(
    a.map((i) => [i.seq, i.text]),
    [
      [2, "Let me check. "],
      [5, "Found a."],
    ],
  );
});

test("the queue follows run.queued / run.started / run.finished", () => {
  const { model } = build([
    user(1, "m-1", "first", "run_1"),
    ev(2, "run.started", { client_message_id: "m-1" }, "run_1"),
    user(3, "m-2", "second", "run_2"),
    ev(4, "run.queued", { client_message_id: "m-2" }, "run_2"),
    user(5, "m-3", "third", "run_3"),
    ev(6, "run.queued", { client_message_id: "m-3" }, "run_3"),
  ]);
  assert.deepEqual(
    queuedRuns(model).map((q) => q.text),
    ["second", "third"],
  );
  assert.equal(activeRun(model).runId, "run_1");
  applyEvent(model, ev(7, "run.finished", { stop_reason: "cancelled" }, "run_3"));
  applyEvent(model, ev(8, "run.finished", { stop_reason: "end_turn" }, "run_1"));
  applyEvent(model, ev(9, "run.started", { client_message_id: "m-2" }, "run_2"));
  assert.deepEqual(queuedRuns(model), []);
  assert.equal(activeRun(model).runId, "run_2");
  const notice = model.items.find((i) => i.type === "notice");
  assert.equal(notice.stop, "cancelled");
  assert.equal(notice.queued, true);
});

test("errors leave a notice with the message; unknown kinds change nothing", () => {
  const { model } = build([user(1, "m-1", "/fail", "run_1"), ev(2, "run.started", {}), ev(3, "run.finished", { stop_reason: "error", message: "boom" })]);
  assert.equal(model.items.at(-1).type, "notice");
  assert.equal(model.items.at(-1).message, "boom");
  const before = JSON.stringify(model);
  assert.deepEqual(applyEvent(model, ev(4, "future.kind", { x: 1 })), []);
  assert.equal(JSON.stringify(model), before);
});

test("the same user.message id twice renders once", () => {
  const { model } = build([user(1, "m-1", "a", "run_1"), user(2, "m-1", "a", "run_1")]);
  assert.equal(model.items.length, 1);
});
