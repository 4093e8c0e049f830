import assert from "node:assert/strict";
import { test } from "node:test";

import { CONFIRMED, FAILED, Ledger, PREPARED, SENT } from "../../static/sessions_app/js/client/ledger.js";

function make(entries = []) {
  const saved = [];
  let n = 0;
  const ledger = new Ledger(entries, { persist: (e) => saved.push(e), newId: () => `m-${++n}`, now: () => 42 });
  return { ledger, saved };
}

test("prepare makes the id and persists it before returning", () => {
  const { ledger, saved } = make();
  const e = ledger.prepare("hello");
  assert.equal(e.id, "m-1");
  assert.equal(e.state, PREPARED);
  assert.equal(saved.length, 1, "persisted synchronously");
  assert.equal(saved[0][0].id, "m-1");
  assert.equal(saved[0][0].state, PREPARED);
});

test("prepared -> sent -> confirmed, keeping the id", () => {
  const { ledger } = make();
  const { id } = ledger.prepare("a");
  assert.ok(ledger.markSent(id));
  assert.equal(ledger.get(id).state, SENT);
  assert.ok(ledger.markSent(id), "re-sent after a reconnect: still sent");
  assert.equal(ledger.get(id).attempts, 2);
  assert.ok(ledger.confirm(id, { seq: 5, run_id: "run_1", status: "started" }));
  const e = ledger.get(id);
  assert.equal(e.state, CONFIRMED);
  assert.equal(e.seq, 5);
  assert.equal(e.id, id);
});

test("confirmed is final: no markSent, no fail, a second confirm changes nothing", () => {
  const { ledger, saved } = make();
  const { id } = ledger.prepare("a");
  ledger.confirm(id, { seq: 3 });
  const writes = saved.length;
  assert.equal(ledger.markSent(id), false);
  assert.equal(ledger.fail(id, "too_large"), false);
  assert.equal(ledger.confirm(id, { seq: 3 }), false);
  assert.equal(ledger.get(id).state, CONFIRMED);
  assert.equal(saved.length, writes, "nothing to persist");
});

test("confirmation can come straight from prepared (a user.message seen first)", () => {
  const { ledger } = make();
  const { id } = ledger.prepare("a");
  assert.ok(ledger.confirm(id));
  assert.equal(ledger.get(id).state, CONFIRMED);
});

test("unconfirmed lists prepared and sent entries in order", () => {
  const { ledger } = make();
  const a = ledger.prepare("a");
  const b = ledger.prepare("b");
  const c = ledger.prepare("c");
  const d = ledger.prepare("d");
  ledger.markSent(a.id);
  ledger.confirm(b.id);
  ledger.fail(d.id, "too_large", "too long");
  assert.deepEqual(
    ledger.unconfirmed().map((e) => e.id),
    [a.id, c.id],
  );
  assert.equal(ledger.get(d.id).state, FAILED);
  assert.equal(ledger.get(d.id).error, "too_large");
});

test("failed entries can be discarded; others cannot", () => {
  const { ledger } = make();
  const a = ledger.prepare("a");
  const b = ledger.prepare("b");
  ledger.fail(b.id, "bad_frame");
  assert.equal(ledger.discard(a.id), false, "an unconfirmed input may already be on the server");
  assert.ok(ledger.discard(b.id));
  assert.deepEqual(
    ledger.entries().map((e) => e.id),
    [a.id],
  );
});

test("a failed entry is confirmed if the log shows it after all", () => {
  const { ledger } = make();
  const a = ledger.prepare("a");
  ledger.fail(a.id, "bad_frame");
  assert.ok(ledger.confirm(a.id, { seq: 9 }));
  assert.equal(ledger.get(a.id).state, CONFIRMED);
  assert.equal(ledger.get(a.id).error, undefined);
});

test("prune drops confirmed entries the transcript shows, only those", () => {
  const { ledger } = make();
  const a = ledger.prepare("a");
  const b = ledger.prepare("b");
  const c = ledger.prepare("c");
  ledger.confirm(a.id);
  ledger.confirm(b.id);
  const rendered = new Set([a.id, c.id]);
  assert.ok(ledger.prune((id) => rendered.has(id)));
  assert.deepEqual(
    ledger.entries().map((e) => e.id),
    [b.id, c.id],
  );
  assert.equal(
    ledger.prune((id) => rendered.has(id)),
    false,
  );
});

test("restored entries keep their state and ids; junk is skipped", () => {
  const { ledger } = make([
    { id: "m-a", text: "a", state: "sent", attempts: 1 },
    { id: "m-a", text: "dup", state: "prepared" },
    { id: "m-b", text: "b", state: "weird" },
    null,
    { id: "m-c", text: "c", state: "prepared" },
  ]);
  assert.deepEqual(
    ledger.unconfirmed().map((e) => [e.id, e.state]),
    [
      ["m-a", "sent"],
      ["m-c", "prepared"],
    ],
  );
});

test("default ids are unique strings within the protocol's limit", async () => {
  const { newClientMessageId } = await import("../../static/sessions_app/js/client/ledger.js");
  const ids = new Set(Array.from({ length: 500 }, () => newClientMessageId()));
  assert.equal(ids.size, 500);
  for (const id of ids) assert.ok(id.length <= 128);
});
