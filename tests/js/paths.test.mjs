// The conversation's tree in the transcript model (static/sessions_app/js/model/transcript.js)
// and what the active path shows (static/sessions_app/js/model/paths.js, branchview.js via
// ui.js against the fake DOM).
import assert from "node:assert/strict";
import { test } from "node:test";

import { activePath, branchControls, isShown } from "../../static/sessions_app/js/model/paths.js";
import { applyEvent, emptyModel } from "../../static/sessions_app/js/model/transcript.js";
import { SessionView } from "../../static/sessions_app/js/view/ui.js";
import { fakeDocument } from "./fakedom.mjs";
import { ev, FakeClock } from "./helpers.mjs";

/** A model after these events (seq from 1). */
function modelOf(...events) {
  const model = emptyModel();
  for (const [i, e] of events.entries()) applyEvent(model, { ...e, seq: i + 1 });
  return model;
}

const user = (run, cmid, text, extra = {}) => ev(0, "user.message", { client_message_id: cmid, text, ...extra }, run);
const started = (run, cmid, extra = {}) => ev(0, "run.started", { client_message_id: cmid, ...extra }, run);
const answer = (run, text) => ev(0, "assistant.message", { text }, run);
const done = (run) => ev(0, "run.finished", { stop_reason: "end_turn" }, run);
const turn = (run, cmid, text) => [user(run, cmid, text), started(run, cmid), answer(run, `re: ${text}`), done(run)];

const shownTexts = (model) => {
  const path = activePath(model);
  return model.items.filter((i) => isShown(i, path)).map((i) => `${i.type}:${i.text ?? ""}`);
};

test("plain inputs make one path; each follows the leaf before it", () => {
  const model = modelOf(...turn("r1", "m1", "one"), ...turn("r2", "m2", "two"));
  assert.deepEqual(activePath(model).order, ["r1", "r2"]);
  assert.equal(model.runs.r2.parent, "r1");
  assert.deepEqual(branchControls(model, activePath(model)), [{ kind: "regenerate", key: "a7", runId: "r2" }]);
});

test("a regenerate answers the same message as a sibling; the old answer is hidden", () => {
  const model = modelOf(...turn("r1", "m1", "one"), started("r2", "g1", { regenerates: "r1", parent_run_id: null }), answer("r2", "again"), done("r2"));
  assert.deepEqual(activePath(model).order, ["r2"]);
  assert.deepEqual(shownTexts(model), ["user:one", "assistant:again"]);
  const controls = branchControls(model, activePath(model));
  assert.deepEqual(
    controls.map((c) => [c.kind, c.index, c.count, c.prev, c.next]),
    [
      ["answer", 2, 2, "r1", null],
      ["regenerate", undefined, undefined, undefined, undefined],
    ],
  );
  // The ledger's id of a regenerate is known to the model (pruned once logged).
  assert.ok(model.idx.user.g1 !== undefined);
});

test("an edit is a new version of the message; a switch brings back the old branch and its turns", () => {
  const events = [
    ...turn("r1", "m1", "one"),
    ...turn("r2", "m2", "two"),
    user("r3", "m3", "uno", { edits: "r1", parent_run_id: null }),
    started("r3", "m3"),
    answer("r3", "re: uno"),
    done("r3"),
  ];
  const model = modelOf(...events);
  assert.deepEqual(shownTexts(model), ["user:uno", "assistant:re: uno"]);
  const nav = branchControls(model, activePath(model)).find((c) => c.kind === "user");
  assert.deepEqual([nav.index, nav.count, nav.prev, nav.next], [2, 2, "r1", null]);
  applyEvent(model, { ...ev(0, "branch.switched", { leaf_run_id: "r2" }, null), seq: events.length + 1 });
  assert.deepEqual(activePath(model).order, ["r1", "r2"]);
  assert.deepEqual(shownTexts(model), ["user:one", "assistant:re: one", "user:two", "assistant:re: two"]);
  const back = branchControls(model, activePath(model)).find((c) => c.kind === "user");
  assert.deepEqual([back.index, back.count, back.prev, back.next], [1, 2, null, "r3"]);
});

test("a gate closed with its branch is cancelled in the model", () => {
  const model = modelOf(
    user("r1", "m1", "/write a x"),
    started("r1", "m1"),
    ev(0, "approval.requested", { approval_id: "ap1", tool_call_id: "c1", tool: "write_file", args: {} }, "r1"),
    ev(0, "approval.decided", { approval_id: "ap1", decision: "cancelled", decided_by: "alice" }, "r1"),
  );
  assert.equal(model.items.find((i) => i.type === "approval").status, "cancelled");
});

const IDS = ["transcript", "pending-list", "queue-panel", "queue", "run-bar", "run-status", "cancel-run", "connection-state", "running", "viewers"];

function view() {
  const doc = fakeDocument();
  for (const id of IDS) {
    const el = doc.createElement("div");
    el.setAttribute("data-testid", id);
    doc.append(el);
  }
  const t = doc.querySelector('[data-testid="transcript"]');
  const clock = new FakeClock();
  const v = new SessionView(doc, { now: clock.now, timers: clock, frames: null });
  v.attach({ isLive: true, isBusy: () => false });
  return { doc, v, t };
}

test("the view hides the rows off the path and puts the branch controls on the shown messages", () => {
  const { doc, v, t } = view();
  const model = emptyModel();
  v.reset(model, 0);
  const events = [...turn("r1", "m1", "one"), started("r2", "g1", { regenerates: "r1", parent_run_id: null }), answer("r2", "again"), done("r2")];
  for (const [i, e] of events.entries()) v.applyChanges(applyEvent(model, { ...e, seq: i + 1 }), model);
  v.flush();
  const rows = t.children;
  const visible = rows.filter((r) => !r.hidden).map((r) => r.dataset.testid);
  assert.deepEqual(visible, ["user-message", "assistant-message"]);
  const shownAnswer = rows.find((r) => r.dataset.testid === "assistant-message" && !r.hidden);
  const nav = shownAnswer.querySelector('[data-testid="branch-nav"]');
  assert.deepEqual([nav.dataset.index, nav.dataset.count], ["2", "2"]);
  assert.equal(nav.querySelector('[data-testid="branch-prev"]').dataset.runId, "r1");
  assert.equal(nav.querySelector('[data-testid="branch-next"]').disabled, true);
  assert.ok(shownAnswer.querySelector('[data-testid="regenerate"]'));
  assert.equal(doc.querySelectorAll('[data-testid="regenerate"]').length, 1);
  assert.ok(rows[0].querySelector('[data-testid="edit-message"]'));
  // Every tab follows a switch: the first answer shows again, the second hides.
  v.applyChanges(applyEvent(model, { ...ev(0, "branch.switched", { leaf_run_id: "r1" }, null), seq: 9 }), model);
  v.flush();
  const now = rows.filter((r) => !r.hidden).map((r) => r.querySelector(":scope > .msg-body")?.textContent);
  assert.deepEqual(now, ["one", "re: one"]);
  assert.equal(doc.querySelectorAll('[data-testid="branch-nav"]').length, 1);
});
