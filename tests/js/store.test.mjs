import assert from "node:assert/strict";
import { test } from "node:test";

import { SessionStore } from "../../static/sessions_app/js/client/store.js";
import { FakeStorage } from "./helpers.mjs";

test("commit and load round-trip epoch, cursor and transcript in ONE key", () => {
  const storage = new FakeStorage();
  const store = new SessionStore(storage);
  const model = { v: 1, items: [{ seq: 1, type: "note" }], runs: {} };
  assert.equal(store.load("s_1"), null);
  assert.ok(store.commit("s_1", { epoch: "E1", cursor: 7, model }));
  assert.deepEqual(storage.writes, ["agent.s.s_1"], "one setItem writes cursor and transcript together");
  const back = store.load("s_1");
  assert.deepEqual(back, { epoch: "E1", cursor: 7, model });
  assert.equal(store.load("s_2"), null, "other sessions are separate");
});

test("unusable snapshots are dropped, not half-used", () => {
  const storage = new FakeStorage();
  const store = new SessionStore(storage);
  storage.setItem("agent.s.s_1", "{not json");
  assert.equal(store.load("s_1"), null);
  storage.setItem("agent.s.s_1", JSON.stringify({ v: 1, session_id: "s_1", epoch: null, cursor: 5, model: {} }));
  assert.equal(store.load("s_1"), null, "a cursor > 0 needs its epoch");
  assert.equal(storage.getItem("agent.s.s_1"), null);
  storage.setItem("agent.s.s_1", JSON.stringify({ v: 1, session_id: "s_OTHER", epoch: "E", cursor: 5, model: {} }));
  assert.equal(store.load("s_1"), null, "a snapshot of another session is refused");
  storage.setItem("agent.s.s_1", JSON.stringify({ v: 99, session_id: "s_1", epoch: "E", cursor: 5, model: {} }));
  assert.equal(store.load("s_1"), null, "another version is refused");
});

test("drop removes the transcript but keeps the ledger", () => {
  const storage = new FakeStorage();
  const store = new SessionStore(storage);
  store.commit("s_1", { epoch: "E", cursor: 3, model: { v: 1 } });
  store.saveLedger("s_1", [{ id: "m-1", text: "hi", state: "prepared" }]);
  store.drop("s_1");
  assert.equal(store.load("s_1"), null);
  assert.deepEqual(store.loadLedger("s_1"), [{ id: "m-1", text: "hi", state: "prepared" }]);
  store.saveLedger("s_1", []);
  assert.equal(storage.getItem("agent.l.s_1"), null, "an empty ledger removes its key");
  assert.deepEqual(store.loadLedger("s_1"), []);
});

test("when storage is full, other sessions' caches are evicted; then our own is removed", () => {
  const storage = new FakeStorage({ quota: 400 });
  const store = new SessionStore(storage, { onError: () => {} });
  assert.ok(store.commit("s_old", { epoch: "E", cursor: 1, model: { v: 1, pad: "x".repeat(150) } }));
  assert.ok(store.commit("s_new", { epoch: "E", cursor: 1, model: { v: 1, pad: "y".repeat(150) } }));
  assert.equal(store.load("s_old"), null, "evicted to make room");
  assert.equal(store.load("s_new").cursor, 1);
  // Too big even alone: the stale snapshot must not survive (it would lie).
  assert.equal(store.commit("s_new", { epoch: "E", cursor: 2, model: { v: 1, pad: "z".repeat(1000) } }), false);
  assert.equal(store.load("s_new"), null);
});

test("the tab id is made once and kept; a copied sessionStorage gets a new one", () => {
  const storage = new FakeStorage();
  const store = new SessionStore(storage);
  const tab = { name: "" };
  const id = store.tabId(tab);
  assert.match(id, /^t-/);
  assert.ok(id.length <= 64);
  assert.equal(store.tabId(tab), id, "same tab, same id (reload keeps window.name)");
  assert.equal(new SessionStore(storage).tabId(tab), id);
  // window.open(): the new window has a copy of the storage but its own window.name
  const copy = new FakeStorage();
  for (const [k, v] of storage.map) copy.setItem(k, v);
  const other = new SessionStore(copy).tabId({ name: "" });
  assert.notEqual(other, id);
  assert.equal(new SessionStore(storage).tabId(tab), id, "the opener keeps its id");
});

test("a snapshot past the size bound is not stored, and an older one is removed", () => {
  const storage = new FakeStorage();
  const store = new SessionStore(storage, { maxSnapshotChars: 500 });
  const small = { items: [], runs: {}, idx: {} };
  assert.equal(store.commit("s_1", { epoch: "E", cursor: 1, model: small }), true);
  const big = { items: [{ text: "x".repeat(600) }], runs: {}, idx: {} };
  assert.equal(store.commit("s_1", { epoch: "E", cursor: 2, model: big }), false);
  assert.equal(store.load("s_1"), null, "never a stale pair: the cache is gone, a refresh reloads");
});
