/**
 * Where a Markdown text is cut for lexing, and the bounds on what is lexed,
 * without lexing anything (the renderer is `markdown.js`).
 *
 * @module chunks
 */

// Bounds on what is lexed, so that no model output can blank a session or
// stall the page (marked's lexer recurses per nesting level and is quadratic
// on some inputs: 5,000 `>` overflowed the stack, 64k characters of
// emphasis took 1.9 s). The text is lexed in chunks (`chunks`), each chunk
// cached by its text, so a streaming message re-lexes only its open chunk.
/** A chunk longer than this (a fenced code block excepted) is shown as plain text. */
export const MAX_CHUNK_CHARS = 16_000;
/** A fenced code block longer than this is shown as plain text. */
export const MAX_CODE_CHARS = 200_000;
/** Nested quotes and lists deeper than this: the chunk is shown as plain text. */
export const MAX_NESTING = 16;
/** While a message streams, its open chunk past this many characters waits, plain, for the end. */
export const STREAM_LEX_CHARS = 4_000;

// A backtick fence's info string holds no backtick (CommonMark), or it is no
// fence: "```a`" must not pass for one and escape the limits below.
export const FENCE = /^ {0,3}(`{3,}(?=[^`\n]*\n?$)|~{3,})/;
const LIST_MARKER = /^(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)/;

/**
 * `text` cut into chunks that Markdown renders the same alone as together:
 * at a blank line followed by a line that starts at the margin and opens no
 * list item (a list, or an item's indented continuation, stays whole), and
 * around top-level fenced code blocks. Never inside a fence.
 * @param {string} text
 * @returns {string[]} whose concatenation is `text`
 */
export function chunks(text) {
  const out = [];
  const lines = text.split(/(?<=\n)/);
  let current = "";
  let fence = null; // the open fence's marker
  let blank = false; // the previous line was blank
  const cut = () => {
    if (current) out.push(current);
    current = "";
  };
  for (const line of lines) {
    const opening = fence === null ? FENCE.exec(line) : null;
    if (fence !== null) {
      current += line;
      const closing = FENCE.exec(line);
      if (closing && closing[1][0] === fence[0] && closing[1].length >= fence.length && !line.slice(closing[0].length).trim()) {
        fence = null;
        cut();
      }
      blank = false;
      continue;
    }
    if (opening) {
      cut();
      fence = opening[1];
      current = line;
      blank = false;
      continue;
    }
    const isBlank = !line.trim();
    if (blank && !isBlank && !/^[ \t]/.test(line) && !LIST_MARKER.test(line)) cut();
    current += line;
    blank = isBlank;
  }
  cut();
  return out;
}

const NESTING_PREFIX = /^(?:[ \t]*(?:>|(?:[-*+]|\d{1,9}[.)])(?=[ \t])))+/;

/**
 * How deep quotes and list items nest in `chunk`, at most (by their markers
 * and indentation), counted without lexing.
 * @param {string} chunk
 * @returns {number}
 */
export function nestingDepth(chunk) {
  let deepest = 0;
  for (const line of chunk.split("\n")) {
    const prefix = NESTING_PREFIX.exec(line);
    const markers = prefix ? (prefix[0].match(/>|[-*+](?=[ \t])|\d{1,9}[.)](?=[ \t])/g) || []).length : 0;
    const indent = /^[ \t]*/.exec(line)[0].replace(/\t/g, "    ").length;
    deepest = Math.max(deepest, markers + Math.floor(indent / 2));
    if (deepest > MAX_NESTING) return deepest;
  }
  return deepest;
}

const LINK_DEF = /^ {0,3}\[([^\]\n]{1,200})\]:[ \t]*<?([^\s>]+)>?(?:[ \t]+("[^"\n]*"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*$/gm;

/**
 * The reference definitions (`[x]: url "title"`) of the whole text, as
 * marked keeps them: a chunk may use one defined in another.
 * @param {string} text
 * @returns {object}
 */
export function linkDefinitions(text) {
  const links = {};
  if (!text.includes("]:")) return links;
  for (const m of text.matchAll(LINK_DEF)) {
    const label = m[1].trim().replace(/\s+/g, " ").toLowerCase();
    if (!(label in links)) links[label] = { href: m[2], title: m[3] ? m[3].slice(1, -1) : "" };
  }
  return links;
}
