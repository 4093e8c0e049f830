// The session page's view (static/sessions_app/js/view/ui.js) against a fake DOM: it projects
// what the client says (live, busy) and what it is told (rows, ledger,
// connection), with injected timers and animation frames.
import assert from "node:assert/strict";
import { test } from "node:test";

import { applyEvent, emptyModel } from "../../static/sessions_app/js/model/transcript.js";
import { SessionView } from "../../static/sessions_app/js/view/ui.js";
import { fakeDocument } from "./fakedom.mjs";
import { ev, FakeClock } from "./helpers.mjs";

const IDS = [
  "transcript",
  "pending-list",
  "queue-panel",
  "queue",
  "run-bar",
  "run-status",
  "cancel-run",
  "connection-state",
  "running",
  "viewers",
  "composer",
  "send",
  "composer-error",
  "session-title",
  "notice",
];
const ACTIONS = ["reload-from-zero", "sign-in", "reload-page", "back-to-list"];

/** The session page's skeleton (templates/sessions_app/session.html's data-testids). */
function page() {
  const doc = fakeDocument();
  const root = doc.createElement("div");
  for (const id of IDS) {
    const el = doc.createElement(id === "transcript" ? "div" : "span");
    el.setAttribute("data-testid", id);
    root.append(el);
  }
  root.querySelector('[data-testid="connection-state"]').dataset.state = "connecting";
  const rejection = doc.createElement("div");
  rejection.setAttribute("data-testid", "rejection");
  rejection.hidden = true;
  const message = doc.createElement("p");
  message.setAttribute("data-testid", "rejection-message");
  rejection.append(message);
  for (const id of ACTIONS) {
    const el = doc.createElement("button");
    el.setAttribute("data-testid", id);
    el.hidden = id !== "back-to-list";
    rejection.append(el);
  }
  const scroller = doc.createElement("main");
  scroller.className = "transcript-scroll";
  root.append(rejection, scroller);
  doc.append(root);
  return doc;
}

/** Animation frames that run only when the test says so. */
function fakeFrames() {
  const queued = new Map();
  let next = 1;
  return {
    request: (fn) => {
      queued.set(next, fn);
      return next++;
    },
    cancel: (id) => queued.delete(id),
    run() {
      const fns = Array.from(queued.values());
      queued.clear();
      for (const fn of fns) fn();
    },
    get pending() {
      return queued.size;
    },
  };
}

function setup() {
  const doc = page();
  const clock = new FakeClock();
  const frames = fakeFrames();
  const view = new SessionView(doc, { now: clock.now, timers: clock, frames });
  const client = { isLive: false, busy: new Set(), isBusy: (kind, id) => client.busy.has(`${kind}:${id}`) };
  view.attach(client);
  const q = (id) => doc.querySelector(`[data-testid="${id}"]`);
  return { doc, clock, frames, view, client, q };
}

function modelWith(...events) {
  const model = emptyModel();
  for (const e of events) applyEvent(model, e);
  return model;
}

const approvalEvent = ev(2, "approval.requested", { approval_id: "ap1", tool_call_id: "tc1", tool: "write_file", args: { path: "a.txt", text: "hi" } });

test("the badge, composer and rejection panel project the connection state", () => {
  const { view, q } = setup();
  view.setConnection("live");
  assert.equal(q("connection-state").dataset.state, "live");
  assert.equal(q("connection-state").textContent, "Live");
  assert.equal(q("rejection").hidden, true);
  assert.equal(q("composer").disabled, false);

  view.setConnection("rejected", { reason: "not_found", message: "no such session" });
  assert.equal(q("connection-state").textContent, "Session not found");
  assert.equal(q("connection-state").dataset.reason, "not_found");
  assert.equal(q("rejection").hidden, false);
  assert.equal(q("rejection").dataset.reason, "not_found");
  assert.match(q("rejection-message").textContent, /does not exist, or it is not yours.*“no such session”/);
  assert.equal(q("composer").disabled, true);
  assert.equal(q("send").disabled, true);
  assert.deepEqual(
    ACTIONS.filter((id) => !q(id).hidden),
    ["back-to-list"],
  );

  view.setConnection("rejected", { reason: "something_new" });
  assert.equal(q("connection-state").textContent, "Disconnected");
  assert.equal(q("rejection-message").textContent, "This session cannot be resumed.");
  assert.deepEqual(
    ACTIONS.filter((id) => !q(id).hidden),
    ["reload-page", "back-to-list"],
  );

  view.setConnection("resuming");
  assert.equal(q("connection-state").dataset.reason, undefined);
  assert.equal(q("rejection").hidden, true);
});

test("the reconnect countdown runs on the injected clock and stops with the next state", () => {
  const { view, clock, q } = setup();
  view.setConnection("reconnecting", { retryAt: clock.now() + 3000 });
  assert.equal(q("connection-state").textContent, "Reconnecting in 3 s");
  clock.advance(1000);
  assert.equal(q("connection-state").textContent, "Reconnecting in 2 s");
  clock.advance(2000);
  assert.equal(q("connection-state").textContent, "Reconnecting…");
  view.setConnection("resuming");
  clock.advance(5000);
  assert.equal(q("connection-state").textContent, "Resuming…");
  assert.equal(clock.timers.size, 0, "no countdown left running");
});

test("approval buttons follow the client's live and busy state, not a copy of it", () => {
  const { view, client, q, doc } = setup();
  view.reset(modelWith(ev(1, "user.message", { text: "go", client_message_id: "m1" }), approvalEvent), 2);
  const approve = () => doc.querySelector('[data-testid="approve"]');
  const status = () => q("approval-decision")?.textContent ?? doc.querySelector('[data-testid="approval-decision"]').textContent;
  assert.equal(approve().disabled, true);
  assert.equal(status(), "Waiting for the connection to decide");

  client.isLive = true;
  view.setConnection("live");
  assert.equal(approve().disabled, false);
  assert.equal(status(), "Waiting for your decision");

  client.busy.add("approval:ap1");
  view.setBusy("approval", "ap1", true);
  assert.equal(approve().disabled, true);
  assert.equal(status(), "Sending your decision…");

  client.busy.delete("approval:ap1");
  view.setBusy("approval", "ap1", false);
  assert.equal(approve().disabled, false);
});

test("the cancel button and the queue follow the client's live and busy state", () => {
  const { view, client, q } = setup();
  const model = modelWith(
    ev(1, "user.message", { text: "first", client_message_id: "m1" }),
    ev(2, "run.started", { client_message_id: "m1" }, "run_1"),
    ev(3, "user.message", { text: "second", client_message_id: "m2" }, "run_2"),
    ev(4, "run.queued", { client_message_id: "m2" }, "run_2"),
  );
  view.reset(model, 4);
  assert.equal(q("run-bar").hidden, false);
  assert.equal(q("cancel-run").dataset.runId, "run_1");
  assert.equal(q("cancel-run").disabled, true, "not live: nothing can be cancelled");
  client.isLive = true;
  view.setConnection("live");
  assert.equal(q("cancel-run").disabled, false);
  const dequeue = q("queue").querySelector("button[data-action=dequeue]");
  assert.equal(dequeue.dataset.runId, "run_2");
  assert.equal(dequeue.disabled, false);
  client.busy.add("cancel:run_1");
  view.setBusy("cancel", "run_1", true);
  assert.equal(q("cancel-run").textContent, "Cancelling…");
  assert.equal(q("cancel-run").disabled, true);
});

test("changes render at the next frame, or by the fallback timer when frames stop", () => {
  const { view, frames, clock, q } = setup();
  const model = emptyModel();
  view.reset(model, 0);
  view.applyChanges(applyEvent(model, ev(1, "user.message", { text: "hello", client_message_id: "m1" })), model);
  view.setCursor(1);
  assert.equal(q("transcript").children.length, 0, "nothing before the frame");
  frames.run();
  assert.equal(q("transcript").children.length, 1);
  assert.equal(q("transcript").dataset.cursor, "1");

  // A hidden tab gets no frames: the fallback renders within 100 ms.
  view.applyChanges(applyEvent(model, ev(2, "user.message", { text: "again", client_message_id: "m2" })), model);
  view.setCursor(2);
  clock.advance(99);
  assert.equal(q("transcript").children.length, 1);
  clock.advance(1);
  assert.equal(q("transcript").children.length, 2);
  assert.equal(q("transcript").dataset.cursor, "2");
  assert.equal(frames.pending, 1, "only the scroll's frame is left");
});

test("pending inputs show until their message is in the transcript, with a status from the client", () => {
  const { view, client, q, frames } = setup();
  const model = emptyModel();
  view.reset(model, 0);
  const entries = [
    { id: "m1", text: "one", state: "sent" },
    { id: "m2", text: "two", state: "failed", error: "too_many_runs", message: "too many runs" },
  ];
  view.setLedger(entries, model);
  frames.run();
  const items = () => q("pending-list").children;
  assert.deepEqual(
    items().map((li) => li.dataset.clientMessageId),
    ["m1", "m2"],
  );
  assert.match(items()[0].textContent, /Waiting for the connection…/);
  assert.match(items()[1].textContent, /Not sent: too many runs/);
  assert.ok(items()[1].querySelector('[data-action="discard"]'));

  client.isLive = true;
  view.setConnection("live");
  frames.run();
  assert.match(items()[0].textContent, /Sending…/);

  view.applyChanges(applyEvent(model, ev(1, "user.message", { text: "one", client_message_id: "m1" })), model);
  view.setLedger(entries, model);
  frames.run();
  assert.deepEqual(
    items().map((li) => li.dataset.clientMessageId),
    ["m2"],
  );
});

test("a notice hides after 6 s on the injected clock", () => {
  const { view, clock, q } = setup();
  view.notify("Already approved by ann.", "info");
  assert.equal(q("notice").hidden, false);
  assert.equal(q("notice").dataset.level, "info");
  clock.advance(5999);
  assert.equal(q("notice").hidden, false);
  clock.advance(1);
  assert.equal(q("notice").hidden, true);
});

test("a row that cannot be built shows its text plainly, and the others still show", () => {
  const { view, q } = setup();
  const model = modelWith(ev(1, "user.message", { text: "fine", client_message_id: "m1" }));
  const broken = {
    key: "x9",
    seq: 9,
    type: "tool",
    text: "the plain text",
    get tool() {
      throw new Error("hostile");
    },
  };
  model.items.push(broken);
  view.reset(model, 9);
  const rows = q("transcript").children;
  assert.equal(rows.length, 2);
  assert.equal(rows[0].dataset.testid, "user-message");
  assert.equal(rows[1].dataset.render, "failed");
  assert.equal(rows[1].textContent, "the plain text");
});

test("presence shows the other tabs and the running badge", () => {
  const { view, q } = setup();
  view.setPresence({ viewers: 3, running: true });
  assert.equal(q("viewers").hidden, false);
  assert.equal(q("viewers").textContent, "2 other tabs are viewing");
  assert.equal(q("viewers").dataset.count, "2");
  assert.equal(q("running").hidden, false);
  view.setPresence({ viewers: 1, running: false });
  assert.equal(q("viewers").hidden, true);
  assert.equal(q("running").hidden, true);
});

test("setTitle shows the server's title in the header and the document", () => {
  const { view, doc, q } = setup();
  view.setTitle("Plan the trip");
  assert.equal(q("session-title").textContent, "Plan the trip");
  assert.equal(q("session-title").dataset.title, "Plan the trip");
  assert.equal(doc.title, "Plan the trip · Agent sessions");
  view.setTitle("");
  assert.equal(q("session-title").textContent, "Untitled session");
});

test("a cursor_expired from a server that sends no epoch says so and offers the list", () => {
  const { view, q } = setup();
  view.setConnection("rejected", { reason: "cursor_expired", earliest: 40 });
  assert.equal(q("connection-state").textContent, "History expired");
  assert.match(q("rejection-message").textContent, /no longer keeps.*#40/);
  assert.deepEqual(
    ACTIONS.filter((id) => !q(id).hidden),
    ["back-to-list"],
  );
});
