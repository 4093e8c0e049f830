/**
 * The interface `SessionClient` drives its display through: ui.js's
 * `SessionView` in the browser, a recorder in tests, `NULL_VIEW` when none.
 * The view reads the client's state through `attach(client)` (`isLive`,
 * `isBusy`); the calls below tell it what changed. Also the client's hook
 * points (`SessionHooks`, `NO_HOOKS`).
 *
 * @module view
 */

/**
 * Steps of a `SessionClient` a caller may watch, and stop (the browser
 * tests' failpoints, hooks.js, are built on them; nothing of the client is
 * ever replaced). Each is optional:
 * - `received(frame)`: an event frame of the session arrived; `false` stops
 *   it before it is applied;
 * - `rendered(seq)`: the event at `seq` is shown and the cursor moved;
 *   `false` stops before it is acked and stored;
 * - `sent(entry)`: an input's `send` frame was written (its ledger entry);
 * - `moved(from, to)`: the session's state moved (every declared
 *   transition, the ones the display is not told of too).
 * @typedef {object} SessionHooks
 * @property {(frame: object) => (boolean|void)} [received]
 * @property {(seq: number) => (boolean|void)} [rendered]
 * @property {(entry: {id: string}) => void} [sent]
 * @property {(from: string, to: string) => void} [moved]
 */

/** The hooks of a client given none: every step goes on. */
export const NO_HOOKS = Object.freeze({ received() {}, rendered() {}, sent() {}, moved() {} });

/** Connection states shown to the person (and in `data-state`). */
export const STATE = Object.freeze({
  CONNECTING: "connecting",
  RESUMING: "resuming",
  REPLAYING: "replaying",
  LIVE: "live",
  RECONNECTING: "reconnecting",
  REJECTED: "rejected",
});

/*
 * A SessionClient's state moves only as `TRANSITIONS` declares (its
 * `_setState` refuses any other move):
 *
 *   connecting   -> resuming     a socket opened: the `resume` is sent
 *   resuming     -> replaying    `resume_ok`: the events up to its head follow
 *   resuming     -> live         `resume_ok` with nothing to replay
 *   replaying    -> live         the cursor reached that head
 *   any          -> reconnecting the socket closed (the transport retries)
 *   any          -> rejected     `resume_rejected` this tab cannot recover from,
 *                                or a close that is final (4400, 4401)
 *   any          -> connecting   reloadFromZero(): the cache dropped, a new socket
 */
const S = STATE;
/** From each state, the states it may move to (see above). */
export const TRANSITIONS = Object.freeze({
  [S.CONNECTING]: [S.RESUMING, S.RECONNECTING, S.REJECTED],
  [S.RESUMING]: [S.REPLAYING, S.LIVE, S.RECONNECTING, S.REJECTED, S.CONNECTING],
  [S.REPLAYING]: [S.LIVE, S.RECONNECTING, S.REJECTED, S.CONNECTING],
  [S.LIVE]: [S.RECONNECTING, S.REJECTED, S.CONNECTING],
  [S.RECONNECTING]: [S.RESUMING, S.REJECTED, S.CONNECTING],
  [S.REJECTED]: [S.CONNECTING],
});

/** What the person is told when the tab rebuilt its transcript from the server. */
export const NOTICE_EPOCH_RELOAD = "This session's history was rebuilt on the server: this tab reloaded it from the start.";
export const NOTICE_EXPIRED_RELOAD = "The server no longer keeps the start of this session: this tab shows what it still has.";

/** `data-reason` values for fatal closes (resume rejections use the protocol's reasons). */
export const REASON_NOT_AUTHENTICATED = "not_authenticated";
export const REASON_PROTOCOL_VIOLATION = "protocol_violation";
/**
 * The state the display shows: "replaying" is shown as "resuming" (the DOM's
 * `data-state` values are resuming until live, as they always were).
 * @param {string} state
 * @returns {string}
 */
export function shownState(state) {
  return state === STATE.REPLAYING ? STATE.RESUMING : state;
}

/**
 * A view that ignores everything; the interface `SessionClient` drives.
 * @type {object}
 */
export const NULL_VIEW = {
  attach(_client) {},
  reset(_model, _cursor) {},
  applyChanges(_changes, _model) {},
  setCursor(_cursor) {},
  flush() {},
  setLedger(_entries, _model) {},
  setConnection(_state, _detail) {},
  setPresence(_presence) {},
  setTitle(_title) {},
  setBusy(_kind, _id, _busy) {},
  notify(_message, _level) {},
};

/**
 * A view with every method of NULL_VIEW: the given object's where it has one.
 * @param {object} view
 * @returns {object}
 */
export function completeView(view) {
  const out = {};
  for (const name of Object.keys(NULL_VIEW)) {
    out[name] = view && typeof view[name] === "function" ? view[name].bind(view) : NULL_VIEW[name];
  }
  return out;
}

/**
 * A client's state for diagnostics and tests (`window.__test.state()`).
 * @param {import("./session.js").SessionClient} c
 * @returns {object}
 */
export function snapshotOf(c) {
  return {
    sessionId: c.sessionId,
    tabId: c.tabId,
    epoch: c.epoch,
    cursor: c.loop.cursor,
    connectionState: shownState(c.state),
    phase: c.state,
    rejection: c.state === STATE.REJECTED ? { ...c.stateDetail } : null,
    ledger: c.ledger.entries(),
    lastResumeAfter: c.lastResumeAfter,
    firstReplayedSeq: c.firstReplayedSeq,
    replayHead: c.replayHead,
    held: c.loop.heldCount,
    presence: { ...c.presence },
    framesSent: { ...c.framesSent },
    stats: { ...c.loop.stats, ...c.stats },
  };
}
