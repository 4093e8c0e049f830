import assert from "node:assert/strict";
import { test } from "node:test";

import { Acker, ApplyLoop, compactedItem } from "../../static/sessions_app/js/model/apply.js";
import { ev, FakeClock } from "./helpers.mjs";

function make(cursor = 0, extra = {}) {
  const clock = new FakeClock();
  const applied = [];
  const sent = [];
  const commits = [];
  const loop = new ApplyLoop({
    cursor,
    apply: (e) => applied.push(e.seq),
    send: (f) => sent.push(f),
    onCommit: (seq) => commits.push(seq),
    now: clock.now,
    ...extra,
  });
  return { loop, applied, sent, commits, clock };
}

test("applies in order and advances the cursor after each apply", () => {
  const seen = [];
  let loop;
  loop = new ApplyLoop({
    apply: (e) => seen.push(["apply", e.seq, loop.cursor]),
    send: () => {},
    onCommit: (seq) => seen.push(["commit", seq, loop.cursor]),
  });
  loop.receive(ev(1));
  loop.receive(ev(2));
  assert.deepEqual(
    seen,
    [
      ["apply", 1, 0],
      ["commit", 1, 1],
      ["apply", 2, 1],
      ["commit", 2, 2],
    ],
    "the cursor moves only after the event is applied",
  );
});

test("ignores seq <= cursor: repeats never apply twice", () => {
  const { loop, applied } = make(5);
  assert.equal(loop.receive(ev(3)), "duplicate");
  assert.equal(loop.receive(ev(5)), "duplicate");
  assert.equal(loop.receive(ev(6)), "applied");
  assert.equal(loop.receive(ev(6)), "duplicate");
  assert.deepEqual(applied, [6]);
  assert.equal(loop.cursor, 6);
});

test("equal payloads with different seqs are different events", () => {
  const { loop, applied } = make();
  loop.receive(ev(1, "assistant.delta", { text: "same" }));
  loop.receive(ev(2, "assistant.delta", { text: "same" }));
  assert.deepEqual(applied, [1, 2]);
});

test("a gap holds later events, sends ONE sync after the cursor, then applies in order", () => {
  const { loop, applied, sent } = make(10);
  assert.equal(loop.receive(ev(13)), "held");
  assert.equal(loop.receive(ev(14)), "held");
  assert.deepEqual(applied, []);
  assert.equal(loop.cursor, 10);
  assert.equal(sent.length, 1, "one sync for the gap, not one per held event");
  assert.equal(sent[0].type, "sync");
  assert.equal(sent[0].after, 10);
  assert.ok(sent[0].request_id);
  loop.onSyncOk({ type: "sync_ok", after: 10, head: 14 });
  // the sync replays 11..14; 13 and 14 repeat what is held
  loop.receive(ev(11));
  loop.receive(ev(12)); // 13 and 14 drain from the hold
  loop.receive(ev(13));
  loop.receive(ev(14));
  loop.receive(ev(15));
  assert.deepEqual(applied, [11, 12, 13, 14, 15]);
  assert.equal(loop.cursor, 15);
  assert.equal(loop.heldCount, 0);
  assert.equal(sent.length, 1);
});

test("no second sync while the first one's replay is still arriving", () => {
  const { loop, sent, clock } = make(0);
  loop.receive(ev(3));
  assert.equal(sent.length, 1);
  loop.onSyncOk({ head: 6 });
  clock.advance(2000);
  loop.receive(ev(1)); // replay in progress: 2 still missing, cursor 1 < target 6
  loop.receive(ev(5));
  assert.equal(sent.length, 1);
  loop.receive(ev(2));
  loop.receive(ev(4));
  loop.receive(ev(6));
  assert.equal(loop.cursor, 6);
  assert.equal(sent.length, 1);
});

test("a gap the sync did not fill is synced again (rate-limited), after the new cursor", () => {
  const { loop, sent, clock } = make(0);
  loop.receive(ev(4));
  loop.onSyncOk({ head: 2 });
  loop.receive(ev(1));
  loop.receive(ev(2)); // caught up with the sync's head; 3 is still missing
  assert.equal(sent.length, 1, "at most one sync per second");
  clock.advance(1000);
  loop.tick();
  assert.equal(sent.length, 2);
  assert.equal(sent[1].after, 2);
});

test("a lost sync_ok times out and the gap is synced again", () => {
  const { loop, sent, clock } = make(0);
  loop.receive(ev(2));
  assert.equal(sent.length, 1);
  clock.advance(4000);
  loop.tick();
  assert.equal(sent.length, 1);
  clock.advance(1000);
  loop.tick();
  assert.equal(sent.length, 2);
  loop.onSyncError();
  assert.equal(loop.syncInFlight, false);
});

test("reset (new socket) drops held events and sync state, keeps the cursor", () => {
  const { loop, applied, sent } = make(3);
  loop.receive(ev(6));
  assert.equal(loop.heldCount, 1);
  loop.reset();
  assert.equal(loop.heldCount, 0);
  assert.equal(loop.syncInFlight, false);
  assert.equal(loop.cursor, 3);
  loop.receive(ev(4));
  assert.deepEqual(applied, [4]);
  loop.reset(0);
  assert.equal(loop.cursor, 0);
  assert.equal(sent.length, 1);
});

test("a reset from inside onCommit stops the drain (socket dropped mid-batch)", () => {
  let loop;
  const applied = [];
  loop = new ApplyLoop({
    apply: (e) => applied.push(e.seq),
    send: () => {},
    onCommit: (seq) => {
      if (seq === 2) loop.reset();
    },
  });
  loop.receive(ev(3));
  loop.receive(ev(4));
  loop.receive(ev(2)); // not contiguous yet: held
  loop.receive(ev(1)); // applies 1, drains 2 -> reset -> 3 and 4 must not apply
  assert.deepEqual(applied, [1, 2]);
  assert.equal(loop.cursor, 2);
  assert.equal(loop.heldCount, 0);
});

test("an apply that throws is reported and the session goes on", () => {
  const errors = [];
  const { loop } = make(0, {
    apply: (e) => {
      if (e.seq === 2) throw new Error("render bug");
    },
    onError: (err, e) => errors.push([err.message, e.seq]),
  });
  loop.receive(ev(1));
  loop.receive(ev(2));
  loop.receive(ev(3));
  assert.equal(loop.cursor, 3);
  assert.deepEqual(errors, [["render bug", 2]]);
});

test("ill-typed seqs are ignored", () => {
  const { loop, applied } = make();
  loop.receive({ ...ev(1), seq: "1" });
  loop.receive({ ...ev(1), seq: 1.5 });
  loop.receive({ ...ev(1), seq: null });
  assert.deepEqual(applied, []);
});

test("acks are batched: one per 250 ms, sooner at 50 events, never below the cursor", () => {
  const clock = new FakeClock();
  const sent = [];
  const acker = new Acker({ send: (f) => sent.push(f), timers: clock, now: clock.now });
  acker.note(1);
  acker.note(2);
  acker.note(3);
  assert.equal(sent.length, 0);
  clock.advance(250);
  assert.deepEqual(sent, [{ type: "ack", seq: 3 }]);
  clock.advance(100);
  for (let s = 4; s < 54; s++) acker.note(s);
  assert.deepEqual(sent[1], { type: "ack", seq: 53 }, "50 events flush at once");
  clock.advance(1000);
  assert.equal(sent.length, 2, "nothing new to ack");
  // a flood: never more than ~10 acks per second
  for (let i = 0; i < 1000; i++) {
    acker.note(100 + i);
    if (i % 10 === 0) clock.advance(1);
  }
  clock.advance(300);
  assert.ok(sent.length - 2 <= 3, `too many acks: ${sent.length - 2}`);
  assert.equal(sent.at(-1).seq, 1099);
});

test("cancelled acks are not sent (socket dropped before the ack)", () => {
  const clock = new FakeClock();
  const sent = [];
  const acker = new Acker({ send: (f) => sent.push(f), timers: clock, now: clock.now });
  acker.note(7);
  acker.cancel();
  clock.advance(1000);
  assert.equal(sent.length, 0);
});

test("a skipped stretch is applied once and moves the cursor to its last seq", () => {
  const { loop, applied, commits } = make(3);
  assert.equal(loop.receive(compactedItem({ from: 4, to: 9, run_id: "R" })), "applied");
  assert.equal(loop.cursor, 9);
  assert.deepEqual(commits, [9]);
  assert.equal(loop.receive(compactedItem({ from: 4, to: 9, run_id: "R" })), "duplicate");
  assert.equal(loop.receive(ev(7)), "duplicate", "nothing inside a stretch applies after it");
  assert.equal(loop.receive(ev(10)), "applied");
  assert.deepEqual(applied, [4, 10]);
});

test("a stretch that begins at or before the cursor still moves it past its end", () => {
  const { loop } = make(6);
  assert.equal(loop.receive(compactedItem({ from: 4, to: 9 })), "applied");
  assert.equal(loop.cursor, 9);
});

test("a stretch after a gap is held, and applied in order once the gap is filled", () => {
  const { loop, applied, sent } = make(1);
  assert.equal(loop.receive(compactedItem({ from: 5, to: 8 })), "held");
  assert.equal(loop.receive(ev(9)), "held");
  assert.equal(sent.length, 1, "a sync asks for the gap");
  loop.receive(ev(2));
  loop.receive(ev(3));
  loop.receive(ev(4));
  assert.deepEqual(applied, [2, 3, 4, 5, 9]);
  assert.equal(loop.cursor, 9);
  assert.equal(loop.heldCount, 0);
});

test("a malformed compacted frame is not applied", () => {
  assert.equal(compactedItem({ from: 5, to: 4 }), null);
  assert.equal(compactedItem({ from: "5", to: 6 }), null);
  assert.equal(compactedItem({ from: 0, to: 6 }), null);
});

test("an event and a stretch held at the same seq are both kept; events it covers are forgotten", () => {
  const { loop, applied } = make(6);
  loop.receive(ev(8));
  loop.receive(compactedItem({ from: 8, to: 20 }));
  loop.receive(ev(12));
  assert.equal(loop.heldCount, 3);
  loop.receive(ev(7));
  assert.deepEqual(applied, [7, 8, 8], "the event at 8, then the stretch from 8");
  assert.equal(loop.cursor, 20);
  assert.equal(loop.heldCount, 0, "nothing left held: no sync goes on asking");
});

test("a long run of held events drains in order, each once", () => {
  const { loop, applied } = make(0);
  for (let seq = 20000; seq >= 2; seq--) loop.receive(ev(seq));
  loop.receive(ev(1));
  assert.equal(applied.length, 20000);
  assert.ok(applied.every((seq, i) => seq === i + 1));
  assert.equal(loop.heldCount, 0);
});
