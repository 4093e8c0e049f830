import assert from "node:assert/strict";
import { test } from "node:test";

import { Backoff } from "../../static/sessions_app/js/client/backoff.js";
import { attachBrowserSignals, Connection, SOCKET_STATE, SOCKET_TRANSITIONS, socketUrl } from "../../static/sessions_app/js/client/socket.js";
import { assertDeclared, FakeClock, makeFakeWebSocket } from "./helpers.mjs";

function make({ random = () => 0.5, config = {} } = {}) {
  const clock = new FakeClock();
  const { FakeWebSocket, sockets } = makeFakeWebSocket();
  const log = [];
  const conn = new Connection({
    url: "ws://h/ws/sessions/",
    WebSocketImpl: FakeWebSocket,
    timers: clock,
    now: clock.now,
    backoff: new Backoff({ random }),
    config,
    handlers: {
      onOpen: () => log.push(["open"]),
      onFrame: (f) => log.push(["frame", f.type]),
      onClose: (i) => log.push(["close", i.code, i.fatal]),
      onWaiting: (d) => log.push(["waiting", d]),
      onConnecting: (n) => log.push(["connecting", n]),
    },
  });
  return { conn, clock, sockets, log };
}

test("socketUrl follows the page's scheme and host", () => {
  assert.equal(socketUrl({ protocol: "http:", host: "localhost:8123" }), "ws://localhost:8123/ws/sessions/");
  assert.equal(socketUrl({ protocol: "https:", host: "example.com" }), "wss://example.com/ws/sessions/");
});

test("a new socket per attempt, with growing jittered delays", () => {
  const { conn, clock, sockets, log } = make({ random: () => 0.9999999 });
  conn.start();
  assert.equal(sockets.length, 1);
  sockets[0].serverClose(1006);
  assert.deepEqual(log.at(-1), ["waiting", 249]);
  clock.advance(248);
  assert.equal(sockets.length, 1);
  clock.advance(1);
  assert.equal(sockets.length, 2, "a fresh WebSocket, never a reused one");
  sockets[1].serverClose(1006);
  assert.deepEqual(log.at(-1), ["waiting", 499]);
  clock.advance(499);
  sockets[2].serverClose(1006);
  assert.deepEqual(log.at(-1), ["waiting", 999]);
});

test("the backoff resets after a connection stayed up ~10 s", () => {
  const { conn, clock, sockets, log } = make({ random: () => 0.9999999 });
  conn.start();
  for (let i = 0; i < 5; i++) {
    sockets.at(-1).serverClose(1006);
    clock.advance(20000);
  }
  sockets.at(-1).open();
  conn.setReady();
  clock.advance(5000);
  sockets.at(-1).serverClose(1006);
  assert.ok(log.at(-1)[1] > 4000, "a short-lived connection does not reset the backoff");
  clock.advance(20000);
  sockets.at(-1).open();
  conn.setReady();
  sockets.at(-1).receive({ type: "pong" });
  clock.advance(10000);
  sockets.at(-1).serverClose(1012);
  assert.deepEqual(log.at(-1), ["waiting", 249]);
});

test("no retry after 4400 or 4401", () => {
  for (const code of [4400, 4401]) {
    const { conn, clock, sockets, log } = make();
    conn.start();
    sockets[0].open();
    sockets[0].serverClose(code);
    assert.deepEqual(log.at(-1), ["close", code, true]);
    clock.advance(60000);
    assert.equal(sockets.length, 1);
    assert.equal(conn.running, false);
  }
});

test("other closes (4413, 4429, 1012, 1006) reconnect", () => {
  for (const code of [4413, 4429, 1012, 1006, 1000]) {
    const { conn, clock, sockets } = make();
    conn.start();
    sockets[0].open();
    sockets[0].serverClose(code);
    clock.advance(300);
    assert.equal(sockets.length, 2, `code ${code}`);
  }
});

test("retryNow (online, tab visible) skips the wait", () => {
  const { conn, clock, sockets } = make({ random: () => 0.9999999 });
  conn.start();
  for (let i = 0; i < 6; i++) {
    sockets.at(-1).serverClose(1006);
    clock.advance(20000);
  }
  sockets.at(-1).serverClose(1006);
  const n = sockets.length;
  conn.retryNow();
  assert.equal(sockets.length, n + 1);
});

test("browser signals: online retries at once; visible retries; offline probes", () => {
  const { conn, clock, sockets } = make({ random: () => 0.9999999 });
  const listeners = {};
  const target = () => ({
    addEventListener: (t, fn) => (listeners[t] = fn),
    removeEventListener: (t) => delete listeners[t],
  });
  const doc = { ...target(), visibilityState: "visible" };
  const detach = attachBrowserSignals(conn, target(), doc);
  conn.start();
  sockets[0].serverClose(1006);
  listeners.online();
  assert.equal(sockets.length, 2);
  sockets[1].serverClose(1006);
  listeners.visibilitychange();
  assert.equal(sockets.length, 3);
  sockets[2].open();
  conn.setReady();
  listeners.offline();
  assert.deepEqual(sockets[2].framesOf("ping").length, 1, "a probe ping");
  clock.advance(5000);
  assert.equal(sockets.length, 3);
  clock.advance(1000);
  assert.equal(sockets.length, 4, "no answer to the probe within 5 s: reconnect");
  detach();
  assert.deepEqual(Object.keys(listeners), []);
});

test("heartbeat: ping after 10 s of silence; reconnect when nothing comes back (~20 s)", () => {
  const { conn, clock, sockets } = make();
  conn.start();
  sockets[0].open();
  clock.advance(5000);
  assert.equal(sockets[0].framesOf("ping").length, 0, "no ping before the handshake");
  conn.setReady();
  sockets[0].receive({ type: "resume_ok" });
  clock.advance(10000);
  assert.equal(sockets[0].framesOf("ping").length, 1);
  sockets[0].receive({ type: "pong" });
  clock.advance(10000);
  assert.equal(sockets[0].framesOf("ping").length, 2);
  // now the network is dead: nothing comes back
  clock.advance(9000);
  assert.equal(sockets.length, 1);
  clock.advance(1500);
  assert.equal(sockets.length >= 1 && sockets[0].closedWith !== null, true, "the dead socket is closed");
  clock.advance(300);
  assert.equal(sockets.length, 2, "and replaced, about 20 s after the last frame");
});

test("a socket stuck connecting is given up", () => {
  const { conn, clock, sockets } = make();
  conn.start();
  clock.advance(20000);
  assert.notEqual(sockets[0].closedWith, null);
  clock.advance(300);
  assert.equal(sockets.length, 2);
});

test("drop() detaches the socket at once: nothing more is read from it", () => {
  const { conn, clock, sockets, log } = make();
  conn.start();
  sockets[0].open();
  conn.drop("test");
  const n = log.length;
  sockets[0].onmessage?.({ data: JSON.stringify({ type: "event" }) });
  assert.equal(log.length, n);
  assert.equal(sockets[0].closedWith.code, 4000);
  clock.advance(300);
  assert.equal(sockets.length, 2);
});

test("stop() closes without a reconnect or onClose", () => {
  const { conn, clock, sockets, log } = make();
  conn.start();
  sockets[0].open();
  conn.stop();
  assert.ok(!log.some((l) => l[0] === "close"));
  clock.advance(60000);
  assert.equal(sockets.length, 1);
});

test("outgoing frames stay under the server's rate limit", () => {
  const { conn, clock, sockets } = make();
  conn.start();
  sockets[0].open();
  conn.setReady();
  const written = [];
  for (let i = 0; i < 100; i++) conn.send({ type: "ack", seq: i }, () => written.push(i));
  assert.equal(sockets[0].sent.length, 40, "a burst of 40");
  clock.advance(1000);
  assert.ok(sockets[0].sent.length <= 61 && sockets[0].sent.length >= 59);
  clock.advance(2100);
  assert.equal(sockets[0].sent.length, 100);
  assert.deepEqual(
    written,
    Array.from({ length: 100 }, (_, i) => i),
    "in order",
  );
});

test("send on a closed transport returns false and writes nothing", () => {
  const { conn, sockets } = make();
  assert.equal(conn.send({ type: "ping" }), false);
  conn.start();
  assert.equal(conn.send({ type: "ping" }), false, "still connecting");
  assert.equal(sockets[0].sent.length, 0);
});

test("the transport's state moves only along declared transitions, each one reported", () => {
  const { conn, clock, sockets } = make({ random: () => 0 });
  const seen = [];
  conn.handlers.onState = (from, to) => seen.push(`${from}>${to}`);
  assert.equal(conn.state, SOCKET_STATE.STOPPED);
  conn.start();
  sockets[0].open();
  conn.setReady();
  sockets[0].serverClose(1012);
  clock.advance(1);
  sockets[1].serverClose(1006); // before it opened
  clock.advance(1000);
  sockets[2].open();
  conn.stop();
  assert.deepEqual(seen, [
    "stopped>connecting",
    "connecting>handshaking",
    "handshaking>ready",
    "ready>waiting",
    "waiting>connecting",
    "connecting>waiting",
    "waiting>connecting",
    "connecting>handshaking",
    "handshaking>stopped",
  ]);
  assertDeclared(seen, SOCKET_TRANSITIONS);
  assert.throws(() => conn._to(SOCKET_STATE.READY), /stopped -> ready is not a declared transition/);
  assert.equal(conn.state, SOCKET_STATE.STOPPED, "a refused transition changes nothing");
});

test("a final close stops the transport; its handler sees it stopped, and no retry follows", () => {
  const { conn, clock, sockets } = make();
  let during = null;
  conn.handlers.onClose = () => {
    during = conn.state;
  };
  conn.start();
  sockets[0].open();
  sockets[0].serverClose(4401);
  assert.equal(during, SOCKET_STATE.STOPPED);
  clock.advance(60000);
  assert.equal(sockets.length, 1);
});

test("stop() from the onConnecting handler opens no socket", () => {
  const { conn, sockets } = make();
  conn.handlers.onConnecting = () => conn.stop();
  conn.start();
  assert.equal(sockets.length, 0);
  assert.equal(conn.state, SOCKET_STATE.STOPPED);
});
