// What the tab sends (static/sessions_app/js/client/outbox.js) through the session client: inputs
// refused or retried, decisions and cancels remembered across sockets, one
// Push per request, stop and send.
import assert from "node:assert/strict";
import { test } from "node:test";

import { decideFrame } from "../../static/sessions_app/js/client/outbox.js";
import * as P from "../../static/sessions_app/js/wire/constants.js";
import { ev } from "./helpers.mjs";
import { parkedAtGate, setup } from "./session_rig.mjs";

test("a refused input is marked failed and never re-sent", () => {
  const { client, sock, resume } = setup();
  client.start();
  resume(1, [ev(1, "session.created", {}, null)]);
  const a = client.submit("x");
  const f = sock().framesOf("send")[0];
  sock().receive({ type: "error", request_id: f.request_id, code: "too_large", message: "too long" });
  assert.equal(client.ledger.get(a.id).state, "failed");
  sock().serverClose(1006);
  resume(1);
  assert.equal(sock().framesOf("send").length, 0);
  client.discard(a.id);
  assert.equal(client.ledger.entries().length, 0);
});

/** A log of four events: run_1 parked at approval ap1. */

test("internal_error: a send and a decide go again after a second, once each", () => {
  const { client, clock, sock, resume } = setup();
  client.start();
  resume(4, parkedAtGate());
  const a = client.submit("x");
  assert.ok(client.decide("ap1", "approve"));
  const [s1] = sock().framesOf("send");
  const [d1] = sock().framesOf("decide");
  sock().receive({ type: "error", request_id: s1.request_id, code: "internal_error", message: "db" });
  sock().receive({ type: "error", request_id: d1.request_id, code: "internal_error", message: "db" });
  assert.notEqual(client.ledger.get(a.id).state, "failed");
  clock.advance(999);
  assert.equal(sock().framesOf("send").length, 1);
  clock.advance(1);
  const sends = sock().framesOf("send");
  const decides = sock().framesOf("decide");
  assert.deepEqual(
    sends.map((f) => f.client_message_id),
    [a.id, a.id],
  );
  assert.deepEqual(
    decides.map((f) => [f.approval_id, f.decision]),
    [
      ["ap1", "approve"],
      ["ap1", "approve"],
    ],
  );
  sock().receive({ type: "send_ok", request_id: sends[1].request_id, client_message_id: a.id, seq: 5, run_id: "run_2", status: "queued" });
  clock.advance(5000);
  assert.equal(sock().framesOf("send").length, 2, "nothing more once acknowledged");
});

test("oversized input is refused before it is stored or sent", () => {
  const { client } = setup();
  assert.equal(client.submit("   ").ok, false);
  assert.equal(client.submit("x".repeat(32001)).ok, false);
  assert.equal(client.submit("\u20ac".repeat(30000)).ok, false, "over the 64 KiB frame limit in UTF-8");
  assert.equal(client.ledger.entries().length, 0);
});

test("decide and cancel: busy until the event; already_decided is reported", () => {
  const { client, view, sock, resume } = setup();
  client.start();
  resume(4, parkedAtGate());
  assert.ok(client.decide("ap1", "approve"));
  const d = sock().framesOf("decide")[0];
  assert.deepEqual([d.approval_id, d.decision], ["ap1", "approve"]);
  assert.deepEqual(view.busy.at(-1), ["approval", "ap1", true]);
  sock().receive({ type: "error", request_id: d.request_id, code: "already_decided", decision: "deny", decided_by: "bob" });
  assert.match(view.notes.at(-1), /denied by bob/);
  assert.deepEqual(view.busy.at(-1), ["approval", "ap1", false]);
  assert.ok(client.cancel());
  assert.equal(sock().framesOf("cancel")[0].run_id, "run_1");
  sock().receive(ev(5, "run.finished", { stop_reason: "cancelled" }, "run_1"));
  assert.deepEqual(view.busy.at(-1), ["cancel", "run_1", false]);
});

test("a decide and a cancel lost with the socket are sent again after the replay, once", () => {
  const { client, sock, resume } = setup();
  client.start();
  resume(2, [ev(1, "session.created", {}, null), ev(2, "run.started", {}, "run_a")]);
  assert.ok(client.decide("ap_1", "approve"));
  assert.ok(client.cancel("run_b"));
  sock().serverClose(1006); // no reply to either
  const r = resume(3, [ev(3, "assistant.delta", { text: "x" }, "run_a")]);
  assert.equal(r.after, 2);
  const again = sock().framesOf("decide");
  assert.deepEqual(
    again.map((f) => [f.approval_id, f.decision]),
    [["ap_1", "approve"]],
  );
  assert.deepEqual(
    sock()
      .framesOf("cancel")
      .map((f) => f.run_id),
    ["run_b"],
  );
  // Answered (or its outcome logged): not sent on the next socket.
  sock().receive({ type: "decide_ok", request_id: again[0].request_id, approval_id: "ap_1", decision: "approve" });
  sock().receive(ev(4, "run.finished", { stop_reason: "cancelled" }, "run_b"));
  sock().serverClose(1006);
  resume(4, []);
  assert.equal(sock().framesOf("decide").length, 0);
  assert.equal(sock().framesOf("cancel").length, 0);
});

test("one Push per request: a decide keeps its push across sockets, gets a new request id, and goes once per socket", () => {
  const { client, sock, resume } = setup();
  client.start();
  resume(4, parkedAtGate());
  assert.ok(client.decide("ap1", "approve"));
  assert.ok(client.decide("ap1", "approve"), "a second click: the same push, written again");
  assert.equal(client.outbox.pushes.size, 1);
  const first = sock().framesOf("decide");
  assert.equal(first.length, 2);
  assert.notEqual(first[0].request_id, first[1].request_id);
  assert.equal(client.isBusy("approval", "ap1"), true);
  sock().serverClose(1006);
  assert.equal(client.isBusy("approval", "ap1"), false, "not in flight without a socket");
  resume(4, []);
  const again = sock().framesOf("decide");
  assert.equal(again.length, 1);
  assert.equal(client.isBusy("approval", "ap1"), true);
  sock().receive({ type: "decide_ok", request_id: again[0].request_id, approval_id: "ap1", decision: "approve" });
  // Taken, but its outcome is not in the log yet: still busy, never sent again.
  assert.equal(client.isBusy("approval", "ap1"), true);
  assert.equal(client.outbox.pushes.get("decide:ap1").remember, false);
  sock().receive(ev(5, "approval.decided", { approval_id: "ap1", decision: "approve", decided_by: "alice" }, "run_1"));
  assert.equal(client.outbox.pushes.size, 0);
  assert.equal(client.isBusy("approval", "ap1"), false);
});

test("a cancel's button stays busy from cancel_ok until its run.finished", () => {
  const { client, sock, resume } = setup();
  client.start();
  resume(4, parkedAtGate());
  assert.ok(client.cancel());
  const c = sock().framesOf("cancel")[0];
  sock().receive({ type: "cancel_ok", request_id: c.request_id, run_id: "run_1" });
  assert.equal(client.isBusy("cancel", "run_1"), true, "not clickable again before the log says");
  sock().receive(ev(5, "run.finished", { stop_reason: "cancelled" }, "run_1"));
  assert.equal(client.isBusy("cancel", "run_1"), false);
});

test("a decision whose outcome is logged before its reply still reports the reply (another tab won)", () => {
  const { client, view, sock, resume } = setup();
  client.start();
  resume(4, parkedAtGate());
  assert.ok(client.decide("ap1", "approve"));
  const d = sock().framesOf("decide")[0];
  // The other tab's decision reaches this one first, then this one's refusal.
  sock().receive(ev(5, "approval.decided", { approval_id: "ap1", decision: "approve", decided_by: "bob" }, "run_1"));
  assert.equal(client.isBusy("approval", "ap1"), false);
  sock().receive({ type: "error", request_id: d.request_id, code: "already_decided", decision: "approve", decided_by: "bob" });
  assert.match(view.notes.at(-1), /Already approved by bob/);
  sock().serverClose(1006);
  resume(5, []);
  assert.equal(sock().framesOf("decide").length, 0, "settled: never sent again");
});

test("stop and send: the input carries interrupt, kept across a drop; the server's feature says it is honoured", () => {
  const { client, sock, resume } = setup();
  client.start();
  assert.equal(client.canInterrupt, false, "not before the server said so");
  resume(2, [ev(1, "session.created", {}, null), ev(2, "run.started", {}, "run_a")], "E1", ["compact", "batch", "interrupt"]);
  assert.equal(client.canInterrupt, true);
  const r = client.submit("now instead", { interrupt: true });
  assert.ok(r.ok);
  const first = sock().framesOf("send");
  assert.deepEqual(
    first.map((f) => [f.text, f.interrupt]),
    [["now instead", true]],
  );
  assert.equal(client.ledger.get(r.id).interrupt, true);
  sock().serverClose(1006); // before its send_ok
  resume(2, [], "E1", ["interrupt"]);
  const again = sock().framesOf("send");
  assert.deepEqual(
    again.map((f) => [f.client_message_id, f.interrupt]),
    [[r.id, true]],
  );
  const plain = client.submit("later");
  assert.equal(sock().framesOf("send").at(-1).interrupt, undefined, `${plain.id} queues as before`);
});

test("a decide frame carries what its decision needs, a reason cut in code points", () => {
  assert.deepEqual(decideFrame("ap", "approve", { reason: "ignored", all: true }), { type: P.DECIDE, approval_id: "ap", decision: "approve", all: true });
  assert.deepEqual(decideFrame("ap", "edit", { args: { path: "b" } }), { type: P.DECIDE, approval_id: "ap", decision: "edit", args: { path: "b" } });
  assert.deepEqual(decideFrame("ap", "respond", { response: "done" }), { type: P.DECIDE, approval_id: "ap", decision: "respond", response: "done" });
  assert.deepEqual(decideFrame("ap", "answer", { answer: { n: 1 } }), { type: P.DECIDE, approval_id: "ap", decision: "answer", answer: { n: 1 } });
  const long = "😀".repeat(P.MAX_REASON_CHARS + 5);
  assert.equal(Array.from(decideFrame("ap", "deny", { reason: long }).reason).length, P.MAX_REASON_CHARS);
});
