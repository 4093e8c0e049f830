import assert from "node:assert/strict";
import { test } from "node:test";

import { FAILPOINTS, Failpoints, hooksEnabled, installTestHooks } from "../../static/sessions_app/js/hooks.js";

test("failpoints are one-shot and named", () => {
  const fp = new Failpoints();
  assert.deepEqual(FAILPOINTS, ["after-receive", "after-render", "after-send"]);
  assert.equal(fp.take("after-send"), false);
  fp.arm("after-send");
  assert.deepEqual(fp.armed(), ["after-send"]);
  assert.equal(fp.take("after-send"), true);
  assert.equal(fp.take("after-send"), false, "one-shot");
  assert.throws(() => fp.arm("after-lunch"), /unknown failpoint/);
});

test('hooks are enabled only by data-test-hooks="1" on the body', () => {
  assert.equal(hooksEnabled({ body: { dataset: {} } }), false);
  assert.equal(hooksEnabled({ body: { dataset: { testHooks: "0" } } }), false);
  assert.equal(hooksEnabled({ body: { dataset: { testHooks: "1" } } }), true);
  assert.equal(hooksEnabled({ body: null }), false);
});

test("window.__test exposes dropSocket, failpoint, state and framesSent", () => {
  const calls = [];
  const client = {
    framesSent: { resume: 1 },
    conn: { drop: (why) => calls.push(["drop", why]) },
    reloadFromZero: () => calls.push(["reload"]),
    // What view.js's snapshotOf reads of a SessionClient.
    sessionId: "s_1",
    loop: { cursor: 7, heldCount: 0, stats: { duplicates: 0 } },
    state: "live",
    stateDetail: {},
    ledger: { entries: () => [] },
    presence: { viewers: 1, running: false },
    stats: { compacted: 0 },
  };
  const win = {};
  const fp = new Failpoints();
  installTestHooks(win, client, fp);
  win.__test.dropSocket();
  win.__test.failpoint("after-render");
  assert.deepEqual(fp.armed(), ["after-render"]);
  const state = win.__test.state();
  assert.equal(state.cursor, 7);
  assert.equal(state.connectionState, "live");
  assert.deepEqual(state.stats, { duplicates: 0, compacted: 0 });
  client.framesSent.send = 2;
  assert.deepEqual(win.__test.framesSent, { resume: 1, send: 2 }, "live counts");
  assert.deepEqual(calls, [["drop", "test dropSocket"]]);
});
