/**
 * The clock and timers every module takes as an injected dependency (tests
 * pass a fake clock): the real ones, in one place.
 *
 * @module timers
 */

/** @typedef {{setTimeout: Function, clearTimeout: Function, setInterval: Function, clearInterval: Function}} Timers */

/** @type {Timers} */
export const realTimers = {
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (id) => globalThis.clearTimeout(id),
  setInterval: (fn, ms) => globalThis.setInterval(fn, ms),
  clearInterval: (id) => globalThis.clearInterval(id),
};

/**
 * A random id with a prefix, e.g. "t-3f9c…" (tab ids, client message ids).
 * @param {string} prefix
 * @returns {string}
 */
export function randomId(prefix) {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return `${prefix}-${c.randomUUID()}`;
  const bytes = new Uint8Array(16);
  if (c && typeof c.getRandomValues === "function") c.getRandomValues(bytes);
  else for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(Math.random() * 256);
  return `${prefix}-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/**
 * A state field's one writer: refuses a transition `table` does not declare
 * (throws: it is a bug, never the network's doing) and reports every change
 * to `onChange(from, to)`. A repeat of the current state changes nothing.
 * @param {Record<string, string[]>} table state -> the states it may move to
 * @param {string} from
 * @param {string} to
 * @param {string} owner for the error's message
 * @returns {boolean} whether the state changes
 */
export function checkTransition(table, from, to, owner) {
  if (from === to) return false;
  if (!(table[from] || []).includes(to)) throw new Error(`${owner}: ${from} -> ${to} is not a declared transition`);
  return true;
}
