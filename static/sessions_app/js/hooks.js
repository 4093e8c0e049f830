/**
 * Fault injection for browser tests. Installed only when the page's body has
 * data-test-hooks="1" (rendered only when settings.AGENT_TEST_HOOKS is on);
 * otherwise nothing here runs, `window.__test` does not exist, and the client
 * has no failpoint to consult: they are the client's hooks (`failpointHooks`,
 * given to `SessionClient` only when hooks are on), so they cost nothing otherwise.
 *
 * window.__test:
 *   dropSocket()      close the current socket as if the network dropped;
 *                     the client reconnects and resumes
 *   failpoint(name)   arm a one-shot failpoint:
 *     "after-receive" on the next event frame, close the socket BEFORE
 *                     applying/rendering it
 *     "after-render"  on the next event, apply and render it and advance the
 *                     cursor, then close the socket BEFORE any ack is sent
 *     "after-send"    right after the next `send` frame is written, close the
 *                     socket (before its send_ok can arrive)
 *   armed()           the failpoints still armed
 *   state()           {cursor, sessionId, epoch, tabId, connectionState,
 *                      rejection, ledger, lastResumeAfter, firstReplayedSeq,
 *                      replayHead, held, presence, framesSent, stats}
 *   framesSent        frames written to sockets so far, by type (live object)
 *   reloadFromZero()  the "reload from the start" action
 *
 * @module hooks
 */

import { snapshotOf } from "./client/view.js";

export const FAILPOINTS = ["after-receive", "after-render", "after-send"];

/** One-shot failpoints, armed by tests and taken by `failpointHooks` below. */
export class Failpoints {
  constructor() {
    this._armed = new Set();
  }

  /**
   * @param {string} name one of FAILPOINTS
   */
  arm(name) {
    if (!FAILPOINTS.includes(name)) throw new Error(`unknown failpoint ${JSON.stringify(name)}; known: ${FAILPOINTS.join(", ")}`);
    this._armed.add(name);
  }

  /**
   * Consume the failpoint if armed.
   * @param {string} name
   * @returns {boolean} whether it fires now
   */
  take(name) {
    return this._armed.delete(name);
  }

  /** @returns {string[]} */
  armed() {
    return Array.from(this._armed);
  }
}

/**
 * Whether this page asked for test hooks.
 * @param {Document} doc
 * @returns {boolean}
 */
export function hooksEnabled(doc) {
  return !!doc.body && doc.body.dataset.testHooks === "1";
}

/**
 * The client's hooks (client/view.js, `SessionHooks`) that fire the failpoints,
 * each once when armed; pass them as `new SessionClient({hooks})`.
 *
 * - "after-receive": an event frame arrives; the socket drops before it is applied
 * - "after-render": an event is shown and the cursor moved; the socket drops before the ack
 * - "after-send": an input's `send` was written; the socket drops before its send_ok
 * @param {Failpoints} failpoints
 * @param {() => import("./client/session.js").SessionClient} client the client they are given to
 * @returns {import("./client/view.js").SessionHooks}
 */
export function failpointHooks(failpoints, client) {
  const drop = (name) => client().conn.drop(`test failpoint ${name}`);
  return {
    received() {
      if (!failpoints.take("after-receive")) return true;
      drop("after-receive");
      return false;
    },
    rendered() {
      if (!failpoints.take("after-render")) return true;
      drop("after-render");
      return false;
    },
    sent() {
      if (failpoints.take("after-send")) drop("after-send");
    },
  };
}

/**
 * Expose window.__test for `client`.
 * @param {Window} win
 * @param {import("./client/session.js").SessionClient} client
 * @param {Failpoints} failpoints the ones its `failpointHooks` fire
 */
export function installTestHooks(win, client, failpoints) {
  const api = {
    dropSocket() {
      client.conn.drop("test dropSocket");
    },
    failpoint(name) {
      failpoints.arm(name);
    },
    armed() {
      return failpoints.armed();
    },
    state() {
      return snapshotOf(client);
    },
    get framesSent() {
      return client.framesSent;
    },
    reloadFromZero() {
      client.reloadFromZero();
    },
    client,
  };
  Object.defineProperty(win, "__test", { value: api, configurable: true, enumerable: false, writable: false });
}
