/**
 * Reconnect delays: exponential backoff with full jitter.
 *
 * The n-th retry (n = 0, 1, 2, ...) waits a uniformly random time in
 * [0, min(capMs, baseMs * 2^n)). The connection resets the counter once a
 * socket has stayed up for a while (see socket.js), so one bad minute does not
 * slow down the next outage.
 *
 * @module backoff
 */

export const DEFAULT_BASE_MS = 250;
export const DEFAULT_CAP_MS = 10000;

export class Backoff {
  /**
   * @param {object} [options]
   * @param {number} [options.baseMs=250] ceiling of the first delay
   * @param {number} [options.capMs=10000] ceiling of every delay
   * @param {() => number} [options.random=Math.random] uniform in [0, 1)
   */
  constructor({ baseMs = DEFAULT_BASE_MS, capMs = DEFAULT_CAP_MS, random = Math.random } = {}) {
    this.baseMs = baseMs;
    this.capMs = capMs;
    this.random = random;
    this.attempt = 0;
  }

  /**
   * The upper bound of the delay for retry number `attempt` (no jitter).
   * @param {number} attempt
   * @returns {number}
   */
  ceiling(attempt) {
    // 2^31 is far past any cap; avoids Infinity for absurd attempt counts.
    const factor = 2 ** Math.min(attempt, 31);
    return Math.min(this.capMs, this.baseMs * factor);
  }

  /**
   * The delay before the next retry, in ms; counts the attempt.
   * @returns {number} an integer in [0, ceiling(attempt))
   */
  next() {
    const ceil = this.ceiling(this.attempt);
    this.attempt += 1;
    const r = Math.min(Math.max(this.random(), 0), 0.999999);
    return Math.floor(r * ceil);
  }

  /** Forget past failures: the next delay is drawn from [0, baseMs) again. */
  reset() {
    this.attempt = 0;
  }
}
