// The session client's test rig: a recorder view and a client on a fake
// socket, clock and storage (shared by session.test.mjs and outbox.test.mjs).
import { Backoff } from "../../static/sessions_app/js/client/backoff.js";
import { SessionClient } from "../../static/sessions_app/js/client/session.js";
import { Connection } from "../../static/sessions_app/js/client/socket.js";
import { SessionStore } from "../../static/sessions_app/js/client/store.js";
import { Failpoints, failpointHooks } from "../../static/sessions_app/js/hooks.js";
import { ev, FakeClock, FakeStorage, makeFakeWebSocket } from "./helpers.mjs";

export const SID = "s_1";

export function recorderView() {
  return {
    states: [],
    cursor: null,
    resets: 0,
    model: null,
    ledger: [],
    notes: [],
    busy: [],
    reset(model, cursor) {
      this.resets += 1;
      this.model = model;
      this.cursor = cursor;
    },
    applyChanges() {},
    setCursor(c) {
      this.cursor = c;
    },
    setLedger(entries) {
      this.ledger = entries;
    },
    setConnection(state, detail) {
      this.states.push(detail?.reason ? `${state}:${detail.reason}` : state);
    },
    setPresence(p) {
      this.presence = p;
    },
    setBusy(kind, id, busy) {
      this.busy.push([kind, id, busy]);
    },
    notify(msg) {
      this.notes.push(msg);
    },
    get state() {
      return this.states.at(-1);
    },
  };
}

export function makeHooks() {
  return new Failpoints();
}

export function setup({ storage = new FakeStorage(), clock = new FakeClock(), hooks = null, moved = null } = {}) {
  const { FakeWebSocket, sockets } = makeFakeWebSocket();
  const store = new SessionStore(storage);
  const view = recorderView();
  const client = new SessionClient({
    sessionId: SID,
    tabId: "t-1",
    store,
    view,
    // Failpoints (``hooks``) and a watcher of the state's moves (``moved``), as a caller gives them.
    hooks: hooks || moved ? { ...(hooks ? failpointHooks(hooks, () => client) : {}), ...(moved ? { moved } : {}) } : undefined,
    timers: clock,
    now: clock.now,
    createConnection: (handlers) =>
      new Connection({
        url: "ws://h/ws/sessions/",
        WebSocketImpl: FakeWebSocket,
        handlers,
        timers: clock,
        now: clock.now,
        backoff: new Backoff({ random: () => 0 }),
      }),
  });
  const sock = () => sockets.at(-1);
  /** Open the next socket and answer its resume with resume_ok (head) and the events. */
  const resume = (head, events = [], epoch = "E1", features = undefined) => {
    clock.advance(1); // backoff delay (random() = 0)
    sock().open();
    const r = sock().framesOf("resume").at(-1);
    sock().receive({
      type: "resume_ok",
      request_id: r.request_id,
      session_id: SID,
      connection_id: "c",
      epoch,
      after: r.after,
      head,
      ...(features ? { features } : {}),
    });
    for (const e of events) sock().receive(e);
    return r;
  };
  return { client, view, clock, sockets, sock, storage, store, resume };
}

export const userMsg = (seq, cmid, text = "hi", run = `run_${seq}`) => ev(seq, "user.message", { client_message_id: cmid, text }, run);
export const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => ev(a + i));

/** A session whose run waits at a gate (ap1), as the server logs it. */
export function parkedAtGate() {
  return [
    userMsg(1, "m-1", "/write a b", "run_1"),
    ev(2, "run.started", {}, "run_1"),
    ev(3, "approval.requested", { approval_id: "ap1", tool_call_id: "c1", tool: "write_file", args: {} }, "run_1"),
    ev(4, "run.paused", { stop_reason: "requires_approval", approval_id: "ap1" }, "run_1"),
  ];
}
