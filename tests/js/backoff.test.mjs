import assert from "node:assert/strict";
import { test } from "node:test";

import { Backoff } from "../../static/sessions_app/js/client/backoff.js";

test("ceilings double from 250 ms and stop at 10 s", () => {
  const b = new Backoff();
  const ceilings = Array.from({ length: 10 }, (_, i) => b.ceiling(i));
  assert.deepEqual(ceilings, [250, 500, 1000, 2000, 4000, 8000, 10000, 10000, 10000, 10000]);
  assert.equal(b.ceiling(10_000), 10000, "no overflow for absurd attempt counts");
});

test("full jitter: each delay is in [0, ceiling)", () => {
  let r = 0;
  const values = [0, 0.5, 0.999999, 0.25];
  const b = new Backoff({ random: () => values[r++ % values.length] });
  for (let i = 0; i < 40; i++) {
    const ceil = b.ceiling(b.attempt);
    const d = b.next();
    assert.ok(Number.isInteger(d));
    assert.ok(d >= 0 && d < ceil, `delay ${d} outside [0, ${ceil})`);
  }
});

test("the top of the jitter approaches the ceiling; the bottom is 0", () => {
  const hi = new Backoff({ random: () => 0.9999999 });
  assert.equal(hi.next(), 249);
  assert.equal(hi.next(), 499);
  const lo = new Backoff({ random: () => 0 });
  assert.equal(lo.next(), 0);
  assert.equal(lo.next(), 0);
});

test("with Math.random the delays stay within bounds over many draws", () => {
  const b = new Backoff();
  for (let i = 0; i < 2000; i++) {
    if (i % 50 === 0) b.reset();
    const ceil = b.ceiling(b.attempt);
    const d = b.next();
    assert.ok(d >= 0 && d < ceil && d <= 10000);
  }
});

test("reset starts over from the base", () => {
  const b = new Backoff({ random: () => 0.9999999 });
  for (let i = 0; i < 8; i++) b.next();
  assert.equal(b.next(), 9999);
  b.reset();
  assert.equal(b.attempt, 0);
  assert.equal(b.next(), 249);
});

test("custom base and cap", () => {
  const b = new Backoff({ baseMs: 100, capMs: 300, random: () => 0.9999999 });
  assert.deepEqual([b.next(), b.next(), b.next(), b.next()], [99, 199, 299, 299]);
});
