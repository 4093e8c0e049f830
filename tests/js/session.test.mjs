// The session client end to end against a fake socket: handshake, replay,
// cursor, acks, the send ledger across drops and refreshes, rejections and the
// test failpoints.
import assert from "node:assert/strict";
import { test } from "node:test";

import { NO_HOOKS, TRANSITIONS } from "../../static/sessions_app/js/client/session.js";
import { snapshotOf } from "../../static/sessions_app/js/client/view.js";
import { checkTransition } from "../../static/sessions_app/js/model/timers.js";
import { assertDeclared, ev, FakeStorage } from "./helpers.mjs";
import { makeHooks, range, SID, setup, userMsg } from "./session_rig.mjs";

test("first connection: resume after 0, replay, then live; cursor, ack and cache follow", () => {
  const { client, view, clock, sock, store, resume } = setup();
  client.start();
  assert.equal(view.state, "connecting");
  clock.advance(0);
  sock().open();
  const r = sock().framesOf("resume")[0];
  assert.deepEqual(
    { ...r, request_id: undefined },
    {
      type: "resume",
      protocol: 1,
      tab_id: "t-1",
      request_id: undefined,
      session_id: SID,
      after: 0,
      features: ["compact", "batch", "interrupt", "branches"],
    },
  );
  assert.equal(view.state, "resuming");
  sock().receive({ type: "resume_ok", request_id: r.request_id, session_id: SID, epoch: "E1", after: 0, head: 3 });
  assert.equal(view.state, "resuming", "live only after the replay");
  sock().receive(ev(1, "session.created", { title: "T" }, null));
  sock().receive(ev(2));
  assert.equal(view.state, "resuming");
  sock().receive(ev(3));
  assert.equal(view.state, "live");
  assert.equal(client.cursor, 3);
  assert.equal(view.cursor, 3);
  assert.equal(sock().framesOf("ack").length, 0, "acks are batched");
  clock.advance(300);
  assert.deepEqual(
    sock()
      .framesOf("ack")
      .map((f) => f.seq),
    [3],
  );
  const snap = store.load(SID);
  assert.equal(snap.cursor, 3);
  assert.equal(snap.epoch, "E1");
  assert.equal(snap.model.items.length, 2, "the transcript the cursor describes");
  void resume;
});

test("a refresh restores the transcript from the cache and resumes after its cursor", () => {
  const storage = new FakeStorage();
  const first = setup({ storage });
  first.client.start();
  first.resume(4, [ev(1, "session.created", {}, null), userMsg(2, "m-x", "hello"), ev(3), ev(4)]);
  first.client.persistNow(); // pagehide
  // the page reloads: a new client on the same sessionStorage
  const second = setup({ storage });
  assert.equal(second.client.cursor, 4);
  assert.equal(second.view.model.items.length, 3, "rendered from the cache before any socket");
  second.client.start();
  const r = second.resume(6, [ev(5), ev(6)]);
  assert.equal(r.after, 4);
  assert.equal(r.epoch, "E1");
  assert.equal(second.client.cursor, 6);
  assert.equal(second.client.firstReplayedSeq, 5);
  assert.equal(second.view.state, "live");
});

test("inputs typed while offline are kept, shown pending, and sent in order once live", () => {
  const { client, view, sock, storage, resume } = setup();
  client.start();
  const a = client.submit("one");
  const b = client.submit("two");
  assert.ok(a.ok && b.ok);
  assert.deepEqual(
    view.ledger.map((e) => e.state),
    ["prepared", "prepared"],
  );
  assert.ok(storage.getItem(`agent.l.${SID}`).includes(a.id), "stored before any transmission");
  resume(2, [ev(1, "session.created", {}, null)]);
  assert.equal(sock().framesOf("send").length, 0, "not before the replay is applied");
  sock().receive(ev(2));
  const sends = sock().framesOf("send");
  assert.deepEqual(
    sends.map((f) => [f.client_message_id, f.text]),
    [
      [a.id, "one"],
      [b.id, "two"],
    ],
  );
  assert.deepEqual(
    view.ledger.map((e) => e.state),
    ["sent", "sent"],
  );
  sock().receive({ type: "send_ok", request_id: sends[0].request_id, client_message_id: a.id, seq: 3, run_id: "r", status: "started" });
  assert.equal(client.ledger.get(a.id).state, "confirmed");
  sock().receive(userMsg(3, a.id, "one"));
  assert.equal(client.ledger.get(a.id), undefined, "pruned once the transcript shows it");
  sock().receive(userMsg(4, b.id, "two"));
  assert.equal(client.ledger.entries().length, 0, "confirmed by the event alone");
});

test("after a drop, only unconfirmed inputs are re-sent, with the same id, after the replay", () => {
  const { client, sock, resume, clock } = setup();
  client.start();
  resume(1, [ev(1, "session.created", {}, null)]);
  const a = client.submit("reached the server");
  const b = client.submit("lost on the way");
  assert.equal(sock().framesOf("send").length, 2);
  sock().serverClose(1006); // neither send_ok arrived
  assert.deepEqual(
    client.ledger.entries().map((e) => e.state),
    ["sent", "sent"],
  );
  clock.advance(1);
  sock().open();
  const r = sock().framesOf("resume")[0];
  assert.equal(r.after, 1);
  sock().receive({ type: "resume_ok", request_id: r.request_id, session_id: SID, epoch: "E1", after: 1, head: 3 });
  sock().receive(userMsg(2, a.id, "reached the server"));
  assert.equal(sock().framesOf("send").length, 0, "nothing is re-sent during the replay");
  sock().receive(ev(3, "run.started", { client_message_id: a.id }, "run_2"));
  const resent = sock().framesOf("send");
  assert.deepEqual(
    resent.map((f) => f.client_message_id),
    [b.id],
    "only the unconfirmed one",
  );
  assert.equal(resent[0].text, "lost on the way");
});

test("failpoint after-send: the socket closes before send_ok; the replay confirms; nothing is sent twice", () => {
  const hooks = makeHooks();
  const { client, sockets, sock, resume } = setup({ hooks });
  client.start();
  resume(1, [ev(1, "session.created", {}, null)]);
  hooks.arm("after-send");
  const a = client.submit("once");
  assert.equal(sockets[0].framesOf("send").length, 1);
  assert.notEqual(sockets[0].closedWith, null, "closed right after the send was written");
  assert.equal(client.ledger.get(a.id).state, "sent");
  resume(3, [userMsg(2, a.id, "once"), ev(3, "run.started", {}, "run_2")]);
  assert.equal(sock().framesOf("send").length, 0);
  assert.equal(client.ledger.entries().length, 0);
});

test("failpoint after-receive: the event is not applied; the resume asks for it again", () => {
  const hooks = makeHooks();
  const { client, sock, resume } = setup({ hooks });
  client.start();
  resume(3, range(1, 3));
  hooks.arm("after-receive");
  sock().receive(ev(4));
  assert.equal(client.cursor, 3);
  const r = resume(4, [ev(4)]);
  assert.equal(r.after, 3);
  assert.equal(client.firstReplayedSeq, 4);
  assert.equal(client.cursor, 4);
});

test("failpoint after-render: the event is committed; no ack is sent; the resume starts after it", () => {
  const hooks = makeHooks();
  const { client, sockets, sock, resume, clock } = setup({ hooks });
  client.start();
  resume(3, range(1, 3));
  clock.advance(300);
  hooks.arm("after-render");
  sock().receive(ev(4));
  sock().receive(ev(5)); // arrives on the dead socket: ignored
  assert.equal(client.cursor, 4);
  assert.ok(!sockets[0].framesOf("ack").some((f) => f.seq === 4), "closed before the ack");
  const r = resume(6, [ev(5), ev(6)]);
  assert.equal(r.after, 4);
  assert.equal(client.firstReplayedSeq, 5);
  assert.equal(client.cursor, 6);
});

test("a gap during live delivery: hold, sync after the cursor, apply in order", () => {
  const { client, sock, resume } = setup();
  client.start();
  resume(2, range(1, 2));
  sock().receive(ev(5));
  assert.equal(client.cursor, 2);
  const sync = sock().framesOf("sync");
  assert.equal(sync.length, 1);
  assert.equal(sync[0].after, 2);
  sock().receive({ type: "sync_ok", request_id: sync[0].request_id, after: 2, head: 5 });
  for (const e of range(3, 6)) sock().receive(e);
  assert.equal(client.cursor, 6);
  assert.equal(client.loop.stats.applied, 6);
});

test("repeated events never double the transcript", () => {
  const { client, sock, resume } = setup();
  client.start();
  resume(2, [ev(1, "session.created", {}, null), userMsg(2, "m-1")]);
  sock().receive(userMsg(2, "m-1"));
  sock().receive(ev(1, "session.created", {}, null));
  assert.equal(client.model.items.length, 2);
});

test("not_found: its own state, no retry, no new session", () => {
  const { client, view, clock, sockets, sock } = setup();
  client.start();
  clock.advance(0);
  sock().open();
  const r = sock().framesOf("resume")[0];
  sock().receive({ type: "resume_rejected", request_id: r.request_id, session_id: SID, reason: "not_found", message: "no such session" });
  assert.equal(view.state, "rejected:not_found");
  clock.advance(60000);
  assert.equal(sockets.length, 1);
  assert.equal(sockets[0].framesOf("start").length, 0);
  assert.equal(client.submit("x").ok, false);
});

test("epoch_mismatch: the tab drops its cache, says so, and reloads from 0 on the same socket, ledger kept", () => {
  const storage = new FakeStorage();
  const first = setup({ storage });
  first.client.start();
  first.resume(3, range(1, 3));
  const pending = first.client.submit("keep me");
  first.client.stop();
  const { client, view, sock, sockets, store, clock } = setup({ storage });
  client.start();
  clock.advance(0);
  sock().open();
  const r = sock().framesOf("resume")[0];
  assert.equal(r.after, 3);
  sock().receive({ type: "resume_rejected", request_id: r.request_id, session_id: SID, reason: "epoch_mismatch", message: "rebuilt" });
  assert.equal(store.load(SID), null, "the cache is dropped");
  assert.equal(client.cursor, 0);
  assert.equal(view.model.items.length, 0);
  assert.equal(view.notes.length, 1, "the person is told");
  assert.match(view.notes[0], /rebuilt on the server/);
  assert.ok(!view.states.some((st) => st.startsWith("rejected")), "never shown as rejected");
  assert.equal(sockets.length, 1, "the same socket");
  const r2 = sock().framesOf("resume")[1];
  assert.equal(r2.after, 0);
  assert.equal(r2.epoch, undefined);
  sock().receive({ type: "resume_ok", request_id: r2.request_id, session_id: SID, epoch: "E2", after: 0, head: 1 });
  sock().receive(ev(1, "session.created", {}, null));
  assert.equal(view.state, "live");
  assert.deepEqual(
    sock()
      .framesOf("send")
      .map((f) => f.client_message_id),
    [pending.id],
  );
  assert.equal(client.epoch, "E2");
});

test("batch: the frames of one message are applied in order, each as if it came alone", () => {
  const { client, view, sock, resume } = setup();
  client.start();
  resume(6, []);
  sock().receive({
    type: "batch",
    frames: [
      ev(1, "session.created", {}, null),
      ev(2, "user.message", { client_message_id: "m1", text: "hi" }, "R"),
      ev(3, "run.started", {}, "R"),
      { type: "compacted", session_id: SID, from: 4, to: 4, run_id: "R" },
      ev(5, "assistant.message", { text: "tok0 " }, "R"),
      ev(6, "run.finished", { stop_reason: "end_turn" }, "R"),
    ],
  });
  assert.equal(client.cursor, 6);
  assert.equal(view.state, "live");
  assert.equal(view.model.items.find((i) => i.type === "assistant").text, "tok0 ");
});

test("cursor_expired: the tab rebuilds from the first event the server keeps, with a notice", () => {
  const storage = new FakeStorage();
  const first = setup({ storage });
  first.client.start();
  first.resume(3, range(1, 3));
  first.client.stop();
  const { client, view, sock, store, clock } = setup({ storage });
  client.start();
  clock.advance(0);
  sock().open();
  const r = sock().framesOf("resume")[0];
  sock().receive({ type: "resume_rejected", request_id: r.request_id, session_id: SID, reason: "cursor_expired", earliest: 10, epoch: "E1" });
  assert.equal(store.load(SID), null);
  assert.match(view.notes[0], /no longer keeps/);
  const r2 = sock().framesOf("resume")[1];
  assert.equal(r2.after, 9);
  assert.equal(r2.epoch, "E1");
  sock().receive({ type: "resume_ok", request_id: r2.request_id, session_id: SID, epoch: "E1", after: 9, head: 10 });
  sock().receive(ev(10));
  assert.equal(view.state, "live");
  assert.equal(client.cursor, 10);
});

test("cursor_expired without an epoch (an older server): shown as rejected, nothing dropped", () => {
  const { client, view, sock, clock, resume } = setup();
  client.start();
  resume(3, range(1, 3));
  sock().serverClose(1013);
  clock.advance(1);
  sock().open();
  const r = sock().framesOf("resume")[0];
  sock().receive({ type: "resume_rejected", request_id: r.request_id, session_id: SID, reason: "cursor_expired", earliest: 10 });
  assert.equal(view.state, "rejected:cursor_expired");
  assert.equal(client.cursor, 3);
});

test("compacted: a skipped stretch moves the cursor over it; the message fills the segment", () => {
  const { client, view, sock, resume } = setup();
  client.start();
  resume(7, [ev(1, "session.created", {}, null), ev(2, "user.message", { client_message_id: "m1", text: "hi" }, "R"), ev(3, "run.started", {}, "R")]);
  sock().receive({ type: "compacted", session_id: SID, from: 4, to: 5, run_id: "R" });
  assert.equal(client.cursor, 5);
  sock().receive(ev(6, "assistant.message", { text: "tok0 tok1 " }, "R"));
  sock().receive(ev(7, "run.finished", { stop_reason: "end_turn" }, "R"));
  assert.equal(view.state, "live");
  const seg = view.model.items.find((i) => i.type === "assistant");
  assert.deepEqual([seg.key, seg.text, seg.final], ["a4", "tok0 tok1 ", true]);
  assert.equal(snapshotOf(client).stats.compacted, 2);
});

test("4401: rejected (signed out), no retry", () => {
  const { client, view, clock, sockets, sock } = setup();
  client.start();
  clock.advance(0);
  sock().open();
  sock().serverClose(4401);
  assert.equal(view.state, "rejected:not_authenticated");
  clock.advance(60000);
  assert.equal(sockets.length, 1);
});

test("a presence older than one applied is ignored", () => {
  const { client, view, sock, resume } = setup();
  client.start();
  resume(0);
  sock().receive({ type: "presence", session_id: SID, viewers: 2, running: true, head: 9 });
  sock().receive({ type: "presence", session_id: SID, viewers: 1, running: false, head: 7 });
  assert.deepEqual(view.presence, { viewers: 2, running: true });
  sock().receive({ type: "presence", session_id: SID, viewers: 1, running: false, head: 10 });
  assert.deepEqual(view.presence, { viewers: 1, running: false });
});

test("presence is passed to the view", () => {
  const { client, view, sock, resume } = setup();
  client.start();
  resume(0);
  sock().receive({ type: "presence", session_id: SID, viewers: 3, running: true });
  assert.deepEqual(view.presence, { viewers: 3, running: true });
  assert.equal(view.state, "live");
});

test("the session's state moves only along declared transitions; a refused one changes nothing", () => {
  const seen = [];
  const { client, sock, resume } = setup({ moved: (from, to) => seen.push(`${from}>${to}`) });
  client.start();
  resume(1, [ev(1, "session.created", {}, null)]);
  sock().serverClose(1006);
  resume(1, []);
  client.reloadFromZero(); // the documented "any -> connecting"
  resume(1, [ev(1, "session.created", {}, null)]);
  assert.deepEqual(seen, [
    "connecting>resuming",
    "resuming>replaying",
    "replaying>live",
    "live>reconnecting",
    "reconnecting>resuming",
    "resuming>live",
    "live>connecting",
    "connecting>resuming",
    "resuming>replaying",
    "replaying>live",
  ]);
  assertDeclared(seen, TRANSITIONS);
  // The one writer of the state checks each move against the table first.
  assert.throws(() => checkTransition(TRANSITIONS, "live", "replaying", "session"), /live -> replaying is not a declared transition/);
  assert.equal(client.state, "live");
});

test("failpoints cost nothing when off: a client given no hooks has the ones that let every step go on", () => {
  const { client } = setup();
  assert.deepEqual(Object.keys(client.hooks).sort(), ["moved", "received", "rendered", "sent"]);
  for (const name of ["moved", "received", "rendered", "sent"]) assert.equal(client.hooks[name], NO_HOOKS[name]);
  const { client: tested } = setup({ hooks: makeHooks() });
  assert.notEqual(tested.hooks.received, NO_HOOKS.received);
});

test("hook points: received and rendered may stop a step, sent is told of each input written", () => {
  const seen = [];
  const { client, resume, sock } = setup();
  client.hooks.received = (frame) => {
    seen.push(["received", frame.seq]);
    return frame.seq !== 3;
  };
  client.hooks.rendered = (seq) => {
    seen.push(["rendered", seq]);
  };
  client.hooks.sent = (entry) => seen.push(["sent", entry.id]);
  client.start();
  resume(2, [ev(1, "session.created", {}, null), userMsg(2, "c0")]);
  sock().receive(ev(3));
  assert.equal(client.cursor, 2, "the event the hook stopped is not applied");
  const sent = client.submit("more");
  assert.deepEqual(seen, [
    ["received", 1],
    ["rendered", 1],
    ["received", 2],
    ["rendered", 2],
    ["received", 3],
    ["sent", sent.id],
  ]);
});

test("the title the server has reaches the view by push, for this session only", () => {
  const { client, sock, resume } = setup();
  const titles = [];
  client.view.setTitle = (t) => titles.push(t);
  client.start();
  resume(0, []);
  sock().receive({ type: "title", session_id: SID, title: "Plan the trip" });
  sock().receive({ type: "title", session_id: "s_other", title: "not this one" });
  assert.deepEqual(titles, ["Plan the trip"]);
});

test("the state is one value: its name, its detail and what the socket's handshake set, replaced whole", () => {
  const { client, resume, sock } = setup();
  client.start();
  resume(3, range(1, 3));
  const live = client.current;
  assert.ok(Object.isFrozen(live));
  assert.equal(live.name, "live");
  assert.deepEqual([live.resumeAfter, live.replayHead, live.firstReplayedSeq], [0, 3, 1]);
  assert.equal(client.lastResumeAfter, 0, "the client's fields read the value");
  sock().serverClose(1006);
  assert.notEqual(client.current, live, "a move makes a new value");
  assert.equal(client.state, "reconnecting");
  assert.equal(client.replayHead, null, "a closed socket's replay head goes with it");
  const r = resume(5, range(4, 5), "E1");
  assert.equal(r.after, 3);
  assert.deepEqual([client.lastResumeAfter, client.firstReplayedSeq, client.replayHead], [3, 4, 5]);
});
