import assert from "node:assert/strict";
import { test } from "node:test";
import { applyEvent, emptyModel, HANDLERS } from "../../static/sessions_app/js/model/transcript.js";
import * as P from "../../static/sessions_app/js/wire/constants.js";
import { ev } from "./helpers.mjs";

// One test a kind: every event kind of the protocol has its handler, and each
// handler does its one thing to the model.

function apply(model, events) {
  const changes = [];
  for (const e of events) changes.push(...applyEvent(model, e));
  return changes;
}

const started = [ev(1, P.K_USER_MESSAGE, { client_message_id: "m1", text: "hi" }), ev(2, P.K_RUN_STARTED, { client_message_id: "m1" })];

test("every event kind of the protocol has a handler, and nothing else does", () => {
  const kinds = Object.entries(P)
    .filter(([k]) => k.startsWith("K_"))
    .map(([, v]) => v)
    .sort();
  assert.deepEqual(Object.keys(HANDLERS).sort(), kinds);
});

test("session.created: the title and the first note", () => {
  const m = emptyModel();
  apply(m, [ev(1, P.K_SESSION_CREATED, { title: "T" }, null)]);
  assert.equal(m.title, "T");
  assert.deepEqual(
    m.items.map((i) => i.type),
    ["note"],
  );
});

test("user.message: a user row, the run pending; the same id twice is one row", () => {
  const m = emptyModel();
  apply(m, [started[0], ev(3, P.K_USER_MESSAGE, { client_message_id: "m1", text: "hi" })]);
  assert.equal(m.items.filter((i) => i.type === "user").length, 1);
  assert.equal(m.runs.run_1.status, "pending");
});

test("run.queued and run.started set the run's status", () => {
  const m = emptyModel();
  apply(m, [ev(1, P.K_RUN_QUEUED, { client_message_id: "m1" })]);
  assert.equal(m.runs.run_1.status, "queued");
  apply(m, [ev(2, P.K_RUN_STARTED, { client_message_id: "m1" })]);
  assert.equal(m.runs.run_1.status, "running");
});

test("assistant.delta appends to the run's open segment", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3), ev(4)]);
  assert.equal(m.items.at(-1).text, "t3 t4 ");
});

test("assistant.message states the segment whole and final", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3), ev(4, P.K_ASSISTANT_MESSAGE, { text: "whole" })]);
  assert.equal(m.items.at(-1).text, "whole");
  assert.equal(m.items.at(-1).final, true);
});

test("tool.call adds a tool row", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3, P.K_TOOL_CALL, { tool_call_id: "c1", tool: "terminal", args: { command: "ls" } })]);
  assert.equal(m.items.at(-1).type, "tool");
});

test("approval.requested adds a pending card, with the note that says why it is asked", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3, P.K_APPROVAL_REQUESTED, { approval_id: "ap_1", tool_call_id: "c2", tool: "slow", args: {}, note: "run it again?" })]);
  const card = m.items.at(-1);
  assert.equal(card.status, "pending");
  assert.equal(card.note, "run it again?");
});

test("approval.decided updates the card; a cancelled gate says so", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3, P.K_APPROVAL_REQUESTED, { approval_id: "ap_1", tool_call_id: "c2", tool: "t", args: {} })]);
  apply(m, [ev(4, P.K_APPROVAL_DECIDED, { approval_id: "ap_1", decision: P.GATE_CANCELLED, decided_by: "bob" })]);
  assert.equal(m.items.at(-1).status, "cancelled");
});

test("a step's cards count the step's gates still waiting, and a denial keeps its reason", () => {
  const m = emptyModel();
  const asked = (seq, id, call) => ev(seq, P.K_APPROVAL_REQUESTED, { approval_id: id, tool_call_id: call, tool: "t", args: {}, kind: "approval", step: "c1" });
  apply(m, [...started, asked(3, "ap_1", "c1"), asked(4, "ap_2", "c2"), asked(5, "ap_3", "c3")]);
  const cards = m.items.filter((it) => it.type === "approval");
  assert.deepEqual(
    cards.map((c) => [c.kind, c.step, c.stepPending]),
    [
      ["approval", "c1", 3],
      ["approval", "c1", 3],
      ["approval", "c1", 3],
    ],
  );
  const changes = apply(m, [ev(6, P.K_APPROVAL_DECIDED, { approval_id: "ap_2", decision: P.DENY, decided_by: "bob", reason: "no" })]);
  assert.deepEqual(
    cards.map((c) => c.stepPending),
    [2, 2, 2],
  );
  assert.equal(cards[1].reason, "no");
  assert.deepEqual(new Set(changes.map((c) => c.item.approvalId)), new Set(["ap_1", "ap_2", "ap_3"]));
});

test("a card logged before kinds is an approval of no step", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3, P.K_APPROVAL_REQUESTED, { approval_id: "ap_1", tool_call_id: "c2", tool: "t", args: {} })]);
  const card = m.items.at(-1);
  assert.deepEqual([card.kind, card.step, card.stepPending], ["approval", "", undefined]);
});

test("tool.result adds a result row", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3, P.K_TOOL_RESULT, { tool_call_id: "c1", ok: false, output: "unknown" })]);
  assert.deepEqual([m.items.at(-1).type, m.items.at(-1).ok], ["result", false]);
});

test("run.paused: the run awaits approval", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3, P.K_RUN_PAUSED, { stop_reason: "requires_approval", approval_id: "ap_1" })]);
  assert.equal(m.runs.run_1.status, "awaiting_approval");
});

test("run.resumed cuts the open segment back to keep characters; the redone step is not doubled", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3, P.K_ASSISTANT_DELTA, { text: "tok0 " }), ev(4, P.K_ASSISTANT_DELTA, { text: "tok1 " })]);
  apply(m, [ev(5, P.K_ASSISTANT_DELTA, { text: "tok2 " }), ev(6, P.K_RUN_RESUMED, { reason: "takeover", keep: 10 })]);
  apply(m, [ev(7, P.K_ASSISTANT_DELTA, { text: "tok2 " }), ev(8, P.K_ASSISTANT_DELTA, { text: "tok3 " })]);
  const segs = m.items.filter((i) => i.type === "assistant");
  assert.equal(segs.length, 1, "the answer goes on in the same segment");
  assert.equal(segs[0].text, "tok0 tok1 tok2 tok3 ");
  const notes = m.items.filter((i) => i.type === "resumed");
  assert.deepEqual(
    notes.map((n) => n.reason),
    ["takeover"],
  );
  apply(m, [ev(9, P.K_RUN_RESUMED, { reason: "handover", keep: 20 })]);
  assert.equal(m.items.filter((i) => i.type === "resumed").length, 1, "one quiet note a run");
});

test("run.resumed counts code points, as the server does", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3, P.K_ASSISTANT_DELTA, { text: "a😀b" }), ev(4, P.K_RUN_RESUMED, { reason: "takeover", keep: 2 })]);
  assert.equal(m.items.find((i) => i.type === "assistant").text, "a😀");
});

test("run.resumed after a finished segment changes no text", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3), ev(4, P.K_ASSISTANT_MESSAGE, { text: "done" }), ev(5, P.K_RUN_RESUMED, { reason: "takeover", keep: 0 })]);
  assert.equal(m.items.find((i) => i.type === "assistant").text, "done");
});

test("run.finished: finished, the open segment final, a notice unless end_turn", () => {
  const m = emptyModel();
  apply(m, [...started, ev(3), ev(4, P.K_RUN_FINISHED, { stop_reason: P.STOP_ERROR, message: "boom" })]);
  assert.equal(m.runs.run_1.status, "finished");
  assert.equal(m.items.find((i) => i.type === "assistant").final, true);
  assert.equal(m.items.at(-1).type, "notice");
});

test("branch.switched moves the leaf to a known run only", () => {
  const m = emptyModel();
  apply(m, started);
  apply(m, [ev(3, P.K_BRANCH_SWITCHED, { leaf_run_id: "run_nope" }, null)]);
  assert.equal(m.leaf, "run_1");
});

test("an unknown kind changes nothing, even one named like an object's own member", () => {
  const m = emptyModel();
  assert.deepEqual(apply(m, [ev(1, "toString", {}), ev(2, "constructor", {})]), []);
});
