import assert from "node:assert/strict";
import { test } from "node:test";

import { FAILPOINTS, Failpoints, hooksEnabled, installTestHooks } from "../../static/js/hooks.js";

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
    snapshot: () => ({ cursor: 7 }),
    reloadFromZero: () => calls.push(["reload"]),
  };
  const win = {};
  const fp = new Failpoints();
  installTestHooks(win, client, fp);
  win.__test.dropSocket();
  win.__test.failpoint("after-render");
  assert.deepEqual(fp.armed(), ["after-render"]);
  assert.deepEqual(win.__test.state(), { cursor: 7 });
  client.framesSent.send = 2;
  assert.deepEqual(win.__test.framesSent, { resume: 1, send: 2 }, "live counts");
  assert.deepEqual(calls, [["drop", "test dropSocket"]]);
});
