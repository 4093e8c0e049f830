/**
 * The transport: one WebSocket at a time to /ws/sessions/, a new one per
 * attempt, reconnecting with backoff until told to stop.
 *
 * A socket opening means "transport available", nothing more: the session
 * layer (session.js) sends its handshake on `onOpen` and calls `setReady()`
 * once the server accepted it. Only then are pings sent (before the handshake
 * the protocol allows nothing but `start`/`resume`).
 *
 * Liveness: with no frame for `pingIntervalMs` a `ping` goes out; if nothing at
 * all arrives within `pongTimeoutMs` after it, the socket is given up and a new
 * one is opened, so a dead socket is noticed within ~20 s. A socket stuck
 * connecting or handshaking for `connectTimeoutMs` is given up too.
 *
 * Outgoing frames go through a token bucket below the server's limit
 * (30/s, burst 60) so a burst of acks and re-sends never gets the socket
 * closed with 4429.
 *
 * Its state is one field, `state`, written only by `_to` (which refuses any
 * move `SOCKET_TRANSITIONS` does not declare and reports each to
 * `onState(from, to)`):
 *
 *   stopped     -> connecting   start()
 *   connecting  -> handshaking  the socket opened: the session's handshake goes out
 *   handshaking -> ready        setReady(): the server accepted the handshake; pings start
 *   connecting, handshaking, ready -> waiting   the socket closed (or was given up): a retry is scheduled
 *   waiting     -> connecting   the retry (or retryNow())
 *   any         -> stopped      stop(), or a close that is final (4400, 4401)
 *
 * @module socket
 */

import { checkTransition, realTimers } from "../model/timers.js";
import * as P from "../wire/constants.js";
import { Backoff } from "./backoff.js";

/** Close codes after which reconnecting cannot help. */
export const FATAL_CLOSE_CODES = [P.CLOSE_PROTOCOL_VIOLATION, P.CLOSE_NOT_AUTHENTICATED];
/** Code the client uses when it gives a socket up itself (dead, test drop). */
export const CLIENT_DROP_CODE = 4000;

export const DEFAULTS = {
  pingIntervalMs: 10000,
  pongTimeoutMs: 10000,
  probeTimeoutMs: 5000,
  connectTimeoutMs: 20000,
  stableAfterMs: 10000,
  tickMs: 1000,
  ratePerSecond: 20,
  burst: 40,
};

/** The transport's states (one field; see the module's comment). */
export const SOCKET_STATE = Object.freeze({
  STOPPED: "stopped",
  CONNECTING: "connecting",
  HANDSHAKING: "handshaking",
  READY: "ready",
  WAITING: "waiting",
});

const S = SOCKET_STATE;
/** From each state, the states it may move to. */
export const SOCKET_TRANSITIONS = Object.freeze({
  [S.STOPPED]: [S.CONNECTING],
  [S.CONNECTING]: [S.HANDSHAKING, S.WAITING, S.STOPPED],
  [S.HANDSHAKING]: [S.READY, S.WAITING, S.STOPPED],
  [S.READY]: [S.WAITING, S.STOPPED],
  [S.WAITING]: [S.CONNECTING, S.STOPPED],
});

// WebSocket.readyState values.
const CONNECTING = 0;
const OPEN = 1;

/**
 * The WebSocket URL for `path` on the page's own host.
 * @param {{protocol: string, host: string}} location
 * @param {string} [path="/ws/sessions/"]
 * @returns {string}
 */
export function socketUrl(location, path = "/ws/sessions/") {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${path}`;
}

/**
 * @typedef {object} ConnectionHandlers
 * @property {() => void} [onOpen] a new socket is open: send the handshake
 * @property {(frame: object) => void} [onFrame] one parsed server frame
 * @property {(info: {code: number, reason: string, fatal: boolean, wasOpen: boolean}) => void} [onClose]
 *   the socket is gone (not called after `stop()`)
 * @property {(delayMs: number, attempt: number) => void} [onWaiting] a retry is scheduled
 * @property {(attempt: number) => void} [onConnecting] a socket is being opened
 * @property {(from: string, to: string) => void} [onState] every change of `state`
 */

export class Connection {
  /**
   * @param {object} options
   * @param {string} options.url
   * @param {Function} [options.WebSocketImpl=globalThis.WebSocket]
   * @param {ConnectionHandlers} [options.handlers]
   * @param {Backoff} [options.backoff]
   * @param {typeof realTimers} [options.timers]
   * @param {() => number} [options.now]
   * @param {Partial<typeof DEFAULTS>} [options.config]
   */
  constructor({ url, WebSocketImpl = globalThis.WebSocket, handlers = {}, backoff = new Backoff(), timers = realTimers, now = Date.now, config = {} }) {
    this.url = url;
    this.WebSocketImpl = WebSocketImpl;
    this.handlers = handlers;
    this.backoff = backoff;
    this.timers = timers;
    this.now = now;
    this.config = { ...DEFAULTS, ...config };
    this.ws = null;
    this.state = S.STOPPED;
    this.attempts = 0; // sockets opened so far
    this.retryTimer = null;
    this.stableTimer = null;
    this.tickTimer = null;
    this.outbox = [];
    this.tokens = this.config.burst;
    this.tokensAt = now();
    this.flushTimer = null;
    this._resetLiveness();
  }

  _resetLiveness() {
    this.startedAt = this.now();
    this.lastFrameAt = this.startedAt;
    this.pingDeadline = null;
  }

  /** THE writer of `state` (see SOCKET_TRANSITIONS). */
  _to(state) {
    const from = this.state;
    if (!checkTransition(SOCKET_TRANSITIONS, from, state, "socket")) return;
    this.state = state;
    this.handlers.onState?.(from, state);
  }

  /** @returns {boolean} whether it connects, or will again (not stopped) */
  get running() {
    return this.state !== S.STOPPED;
  }

  /** @returns {boolean} whether the current socket opened (its handshake may be pending) */
  get _opened() {
    return this.state === S.HANDSHAKING || this.state === S.READY;
  }

  /** @returns {boolean} whether a socket is open (the handshake may still be pending) */
  get isOpen() {
    return !!this.ws && this.ws.readyState === OPEN;
  }

  /** @returns {boolean} whether a retry is scheduled */
  get isWaiting() {
    return this.state === S.WAITING;
  }

  /** Start connecting (no-op if already running). Resets the backoff. */
  start() {
    if (this.running) return;
    this.backoff.reset();
    this._connect();
  }

  /**
   * Close for good (until `start()`): no reconnect, no `onClose`.
   * @param {number} [code=1000]
   * @param {string} [reason]
   */
  stop(code = P.CLOSE_NORMAL, reason = "client stopped") {
    this._to(S.STOPPED);
    this._cancelRetry();
    this._teardown(code, reason);
  }

  /** If waiting to retry, retry now (the browser came online, the tab became visible). */
  retryNow() {
    if (this.state !== S.WAITING) return;
    this._cancelRetry();
    this._connect();
  }

  /**
   * Give the current socket up as if the network had dropped: handlers are
   * detached at once (nothing more is read from it) and a reconnect follows.
   * @param {string} [reason]
   */
  drop(reason = "dropped") {
    if (!this.ws) return;
    const wasOpen = this._opened;
    this._teardown(CLIENT_DROP_CODE, reason);
    this._closed({ code: CLIENT_DROP_CODE, reason, wasClean: false }, wasOpen);
  }

  /**
   * Check that the socket is alive now: a ping, and a short deadline for any
   * frame. Used on `online`/`offline` and when a tab becomes visible.
   */
  probe() {
    if (this.state !== S.READY || !this.isOpen) return;
    const deadline = this.now() + this.config.probeTimeoutMs;
    this._writePing();
    this.pingDeadline = Math.min(this.pingDeadline ?? Infinity, deadline);
  }

  /** The server accepted the handshake on this socket: pings start. */
  setReady() {
    if (this.state === S.HANDSHAKING) this._to(S.READY);
  }

  /**
   * Queue a frame for the current socket. Dropped (false) when no socket is
   * open: frames never outlive their socket; the session layer re-sends what
   * matters after the next handshake.
   * @param {object} frame
   * @param {(frame: object) => void} [onWritten] called right after the frame is written
   * @returns {boolean} whether it was written or queued
   */
  send(frame, onWritten) {
    if (!this.isOpen) return false;
    this.outbox.push({ frame, onWritten, ws: this.ws });
    this._flush();
    return true;
  }

  _refill() {
    const now = this.now();
    const elapsed = Math.max(0, now - this.tokensAt) / 1000;
    this.tokens = Math.min(this.config.burst, this.tokens + elapsed * this.config.ratePerSecond);
    this.tokensAt = now;
  }

  _flush() {
    this._refill();
    while (this.outbox.length && this.tokens >= 1) {
      const item = this.outbox.shift();
      if (item.ws !== this.ws || !this.isOpen) continue;
      this.tokens -= 1;
      this.ws.send(JSON.stringify(item.frame));
      if (item.onWritten) item.onWritten(item.frame);
    }
    if (this.outbox.length && this.flushTimer === null) {
      const wait = Math.ceil(((1 - this.tokens) / this.config.ratePerSecond) * 1000) + 1;
      this.flushTimer = this.timers.setTimeout(
        () => {
          this.flushTimer = null;
          this._flush();
        },
        Math.max(wait, 5),
      );
    }
  }

  _writePing() {
    if (!this.isOpen) return;
    this.send({ type: P.PING, request_id: `ping-${this.now()}` });
    this.pingDeadline = this.now() + this.config.pongTimeoutMs;
  }

  _connect() {
    this._teardown(CLIENT_DROP_CODE, "replaced");
    this._to(S.CONNECTING);
    this.attempts += 1;
    this._resetLiveness();
    this.handlers.onConnecting?.(this.attempts);
    if (this.state !== S.CONNECTING) return; // stopped by that handler
    let ws;
    try {
      ws = new this.WebSocketImpl(this.url);
    } catch (err) {
      // e.g. a malformed URL or a blocked scheme: treat as a failed attempt
      this._closed({ code: 1006, reason: String(err), wasClean: false }, false);
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this._to(S.HANDSHAKING);
      this.lastFrameAt = this.now();
      this.tokens = this.config.burst;
      this.tokensAt = this.now();
      this.stableTimer = this.timers.setTimeout(() => {
        this.stableTimer = null;
        if (this.ws === ws) this.backoff.reset();
      }, this.config.stableAfterMs);
      this.handlers.onOpen?.();
    };
    ws.onmessage = (msg) => {
      if (this.ws !== ws) return;
      this.lastFrameAt = this.now();
      this.pingDeadline = null;
      if (typeof msg.data !== "string") return; // the protocol has no binary frames
      let frame;
      try {
        frame = JSON.parse(msg.data);
      } catch {
        return;
      }
      if (!frame || typeof frame !== "object" || typeof frame.type !== "string") return;
      this.handlers.onFrame?.(frame);
    };
    ws.onerror = () => {
      // always followed by close
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      const wasOpen = this._opened;
      this._teardown(null);
      this._closed(ev, wasOpen);
    };
    this.tickTimer = this.timers.setInterval(() => this._tick(), this.config.tickMs);
  }

  _tick() {
    if (!this.ws) return;
    const now = this.now();
    if (this.state !== S.READY) {
      if (now - this.startedAt >= this.config.connectTimeoutMs) this.drop("connect or handshake timeout");
      return;
    }
    if (this.pingDeadline !== null) {
      if (now >= this.pingDeadline) this.drop("no answer to ping");
      return;
    }
    if (now - this.lastFrameAt >= this.config.pingIntervalMs) this._writePing();
  }

  /** Detach and close the current socket, clear its timers; no handler is called. */
  _teardown(code, reason) {
    const ws = this.ws;
    this.ws = null;
    this.outbox = [];
    if (this.flushTimer !== null) this.timers.clearTimeout(this.flushTimer);
    this.flushTimer = null;
    if (this.stableTimer !== null) this.timers.clearTimeout(this.stableTimer);
    this.stableTimer = null;
    if (this.tickTimer !== null) this.timers.clearInterval(this.tickTimer);
    this.tickTimer = null;
    if (!ws) return;
    ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
    if (code !== null && (ws.readyState === CONNECTING || ws.readyState === OPEN)) {
      try {
        ws.close(code, reason);
      } catch {
        // closing a socket that is going away anyway
      }
    }
  }

  _closed(ev, wasOpen) {
    const code = ev.code ?? 1006;
    const fatal = FATAL_CLOSE_CODES.includes(code);
    // Waiting from here: the close handler may stop it for good.
    this._to(fatal ? S.STOPPED : S.WAITING);
    this.handlers.onClose?.({ code, reason: ev.reason || "", fatal, wasOpen });
    if (this.state !== S.WAITING) return;
    this._scheduleRetry();
  }

  _scheduleRetry() {
    this._cancelRetry();
    const delay = this.backoff.next();
    this.retryTimer = this.timers.setTimeout(() => {
      this.retryTimer = null;
      this._connect();
    }, delay);
    this.handlers.onWaiting?.(delay, this.backoff.attempt);
  }

  _cancelRetry() {
    if (this.retryTimer !== null) this.timers.clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }
}

/**
 * Wire browser signals to a connection: retry at once when the browser goes
 * online or a hidden tab becomes visible; probe the socket on those and on
 * `offline` (a socket can be dead without a close event).
 * @param {Connection} conn
 * @param {Window} win
 * @param {Document} doc
 * @returns {() => void} removes the listeners
 */
export function attachBrowserSignals(conn, win, doc) {
  const wake = () => {
    if (conn.isWaiting) conn.retryNow();
    else conn.probe();
  };
  const onVisible = () => {
    if (doc.visibilityState === "visible") wake();
  };
  const onOffline = () => conn.probe();
  const onPageShow = (ev) => {
    if (ev.persisted) wake();
  };
  win.addEventListener("online", wake);
  win.addEventListener("offline", onOffline);
  win.addEventListener("pageshow", onPageShow);
  doc.addEventListener("visibilitychange", onVisible);
  return () => {
    win.removeEventListener("online", wake);
    win.removeEventListener("offline", onOffline);
    win.removeEventListener("pageshow", onPageShow);
    doc.removeEventListener("visibilitychange", onVisible);
  };
}
