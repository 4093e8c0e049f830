/**
 * Markdown for the agent's text, built as DOM nodes, never as HTML.
 *
 * marked's lexer turns the text into tokens; this module builds the elements
 * for them with createElement and textContent. So nothing the model writes
 * is ever parsed as HTML:
 * - raw HTML in the text (`<script>`, `<img onerror>`) is shown as text;
 * - a link keeps its destination only when it is http(s) or mailto, and
 *   opens in a new tab without referrer; anything else is plain text;
 * - an image is shown as a link to it, never loaded: a model steered by a
 *   prompt injection must not make the browser fetch a URL carrying data;
 * - a fenced code block is highlighted by highlight.js, whose markup passes
 *   DOMPurify (spans with classes, nothing else) on its way in (both loaded
 *   with the first code block, `highlight.js`), and gets a copy button.
 *
 * While the text streams, `MarkdownView.render` is called with the whole text
 * so far; blocks whose source is unchanged keep their nodes (no flicker, a
 * selection or a copied code block stays put), only the changed tail is
 * rebuilt.
 *
 * @module markdown
 */

import { Lexer } from "../../vendor/marked/marked.esm.js";
import { chunks, FENCE, linkDefinitions, MAX_CHUNK_CHARS, MAX_CODE_CHARS, MAX_NESTING, nestingDepth, STREAM_LEX_CHARS } from "./chunks.js";

// The cutting and its bounds, for the renderer's users and tests.
export { chunks, linkDefinitions, MAX_CHUNK_CHARS, MAX_CODE_CHARS, MAX_NESTING, nestingDepth, STREAM_LEX_CHARS } from "./chunks.js";

/**
 * highlight.js and DOMPurify (`highlight.js` here), loaded when the first code
 * block appears: a session without code never fetches or compiles them.
 * @type {Promise<object>|null}
 */
let highlighting = null;
/** The loaded module, once it is. */
let highlighter = null;

function loadHighlighter() {
  highlighting ??= import("./highlight.js").then((module) => {
    highlighter = module;
    return module;
  });
  return highlighting;
}
/** How long a copy button says "Copied". */
const COPIED_MS = 1500;

const LINK_SCHEMES = new Set(["http:", "https:", "mailto:"]);
const ENTITIES = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'", nbsp: "\u00a0" };

/**
 * The destination a link may have, or null: absolute http(s) or mailto only
 * (no javascript:, data:, relative or protocol-relative URLs).
 * @param {string} href
 * @returns {string|null}
 */
export function safeHref(href) {
  if (typeof href !== "string") return null;
  const trimmed = href.trim();
  if (!/^(https?:\/\/|mailto:)/i.test(trimmed)) return null;
  try {
    const url = new URL(trimmed);
    return LINK_SCHEMES.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

/**
 * Markdown's character references in text (`&amp;`, `&#39;`, `&#x1F600;`),
 * decoded to the characters they stand for; anything else is left as written.
 * @param {string} text
 * @returns {string}
 */
export function decodeEntities(text) {
  if (!text.includes("&")) return text;
  return text.replace(/&(#x[0-9a-f]{1,6}|#[0-9]{1,7}|[a-z]{2,6});/gi, (whole, name) => {
    if (name[0] !== "#") return ENTITIES[name.toLowerCase()] ?? whole;
    const code = name[1] === "x" || name[1] === "X" ? Number.parseInt(name.slice(2), 16) : Number(name.slice(1));
    if (!code || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return "\ufffd";
    return String.fromCodePoint(code);
  });
}

/**
 * The block tokens of `text` (marked's lexer, GitHub-flavoured).
 * @param {string} text
 * @returns {Array<object> & {links: object}}
 */
export function lex(text) {
  return Lexer.lex(text, { gfm: true, breaks: false });
}

function el(doc, tag, attrs, children) {
  const node = doc.createElement(tag);
  if (attrs) for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (children) for (const child of children) if (child) node.append(child);
  return node;
}

function inline(doc, tokens, out) {
  for (const t of tokens || []) {
    switch (t.type) {
      case "strong":
        out.append(inline(doc, t.tokens, el(doc, "strong")));
        break;
      case "em":
        out.append(inline(doc, t.tokens, el(doc, "em")));
        break;
      case "del":
        out.append(inline(doc, t.tokens, el(doc, "del")));
        break;
      case "codespan":
        out.append(el(doc, "code", null, [t.text]));
        break;
      case "br":
        out.append(el(doc, "br"));
        break;
      case "link": {
        const href = safeHref(t.href);
        if (!href) {
          inline(doc, t.tokens, out);
          break;
        }
        const a = el(doc, "a", { href, rel: "noopener noreferrer nofollow", target: "_blank" });
        if (t.title) a.title = t.title;
        out.append(inline(doc, t.tokens, a));
        break;
      }
      case "image": {
        // Shown as a link to the image, never fetched (see the module docstring).
        const href = safeHref(t.href);
        const label = `Image: ${decodeEntities(t.text || "") || href || t.href}`;
        if (!href) out.append(label);
        else out.append(el(doc, "a", { href, rel: "noopener noreferrer nofollow", target: "_blank", class: "md-image-link" }, [label]));
        break;
      }
      case "escape":
        out.append(t.text);
        break;
      case "html":
        out.append(t.raw); // shown as written, never parsed
        break;
      case "text":
        if (t.tokens) inline(doc, t.tokens, out);
        else out.append(t.escaped ? t.text : decodeEntities(t.text));
        break;
      default:
        out.append(t.raw || "");
    }
  }
  return out;
}

function highlighted(doc, text, lang) {
  const code = el(doc, "code");
  code.textContent = text;
  if (!lang) return code;
  if (highlighter) {
    highlighter.highlightInto(code, text, lang);
  } else {
    // Shown plain at once, highlighted when the highlighter has arrived (if
    // the block is still this text by then: a streaming block is rebuilt).
    loadHighlighter().then(
      (module) => {
        if (code.isConnected && code.textContent === text) module.highlightInto(code, text, lang);
      },
      () => {}, // stays plain
    );
  }
  return code;
}

function copyText(doc, text, button) {
  const done = (ok) => {
    button.textContent = ok ? "Copied" : "Copy failed";
    button.dataset.state = ok ? "copied" : "failed";
    setTimeout(() => {
      button.textContent = "Copy";
      delete button.dataset.state;
    }, COPIED_MS);
  };
  const nav = doc.defaultView?.navigator;
  if (nav?.clipboard?.writeText) {
    nav.clipboard.writeText(text).then(
      () => done(true),
      () => done(false),
    );
  } else {
    done(false);
  }
}

function codeBlock(doc, t) {
  const lang = (t.lang || "").trim().split(/\s+/)[0].toLowerCase();
  const text = t.text;
  const button = el(doc, "button", { type: "button", class: "md-copy", "data-testid": "copy-code", "aria-label": "Copy code" }, ["Copy"]);
  button.addEventListener("click", () => copyText(doc, text, button));
  const head = el(doc, "div", { class: "md-code-head" }, [el(doc, "span", { class: "md-code-lang" }, [lang || "text"]), button]);
  const pre = el(doc, "pre", { class: "md-pre" }, [highlighted(doc, text, lang)]);
  return el(doc, "div", { class: "md-code", "data-testid": "code-block", "data-lang": lang }, [head, pre]);
}

function listItem(doc, item, loose) {
  const li = el(doc, "li");
  if (item.task) {
    li.className = "md-task";
    const box = el(doc, "input", { type: "checkbox", disabled: "" });
    box.checked = Boolean(item.checked);
    li.append(box, " ");
  }
  for (const t of item.tokens || []) {
    if (t.type === "checkbox") continue;
    // A tight list's items hold bare text, a loose one's paragraphs.
    if (t.type === "text" && !loose) inline(doc, t.tokens || [t], li);
    else {
      const node = block(doc, t);
      if (node) li.append(node);
    }
  }
  return li;
}

function table(doc, t) {
  const cell = (tag, c) => {
    const node = inline(doc, c.tokens, el(doc, tag));
    if (c.align) node.className = `md-align-${c.align}`;
    return node;
  };
  const head = el(doc, "thead", null, [
    el(
      doc,
      "tr",
      null,
      t.header.map((c) => cell("th", c)),
    ),
  ]);
  const body = el(
    doc,
    "tbody",
    null,
    t.rows.map((row) =>
      el(
        doc,
        "tr",
        null,
        row.map((c) => cell("td", c)),
      ),
    ),
  );
  // Wide tables scroll inside the message, not the page.
  return el(doc, "div", { class: "md-table" }, [el(doc, "table", null, [head, body])]);
}

/**
 * The DOM node of one block token, or null for one that shows nothing.
 * @param {Document} doc
 * @param {object} t a block token from `lex`
 * @returns {Node|null}
 */
export function block(doc, t) {
  switch (t.type) {
    case "space":
    case "def":
      return null;
    case "heading":
      return inline(doc, t.tokens, el(doc, `h${Math.min(Math.max(t.depth, 1), 6)}`, { class: "md-h" }));
    case "paragraph":
      return inline(doc, t.tokens, el(doc, "p"));
    case "text":
      return inline(doc, t.tokens || [t], el(doc, "p"));
    case "code":
      return codeBlock(doc, t);
    case "blockquote": {
      const quote = el(doc, "blockquote");
      for (const child of t.tokens || []) {
        const node = block(doc, child);
        if (node) quote.append(node);
      }
      return quote;
    }
    case "list": {
      const list = el(doc, t.ordered ? "ol" : "ul");
      if (t.ordered && t.start !== "" && t.start !== 1) list.setAttribute("start", String(t.start));
      for (const item of t.items) list.append(listItem(doc, item, t.loose));
      return list;
    }
    case "table":
      return table(doc, t);
    case "hr":
      return el(doc, "hr");
    case "html":
      return el(doc, "p", null, [t.raw.replace(/\n+$/, "")]); // shown as written
    default:
      return t.raw ? el(doc, "p", null, [t.raw]) : null;
  }
}

// Text with none of these can mean nothing in Markdown but a paragraph of
// itself: no markup character, no line break, no autolink, and nothing at the
// start that opens a block (a list, a quote, a heading, indented code).
const MARKUP = /[\n\r`*_[\]<>#|~&!\\@]|https?:|www\./i;
const BLOCK_START = /^[\s\-+=>\d]/;

/**
 * Whether `text` renders as one paragraph of exactly itself.
 * @param {string} text
 * @returns {boolean}
 */
export function isPlain(text) {
  return text.length > 0 && !MARKUP.test(text) && !BLOCK_START.test(text);
}

function lexChunk(chunk, links) {
  const lexer = new Lexer({ gfm: true, breaks: false });
  Object.assign(lexer.tokens.links, links);
  return lexer.lex(chunk);
}

/**
 * A chunk shown as the text it is: what cannot be rendered safely or
 * cheaply never hides itself or another message.
 * @param {Document} doc
 * @param {string} chunk
 * @returns {Node}
 */
function plainChunk(doc, chunk) {
  return el(doc, "p", { class: "md-plain", "data-md": "plain" }, [chunk.replace(/\n+$/, "")]);
}

/**
 * The nodes of one chunk: its blocks, or the chunk as plain text when it is
 * too long, nests too deep, or the lexer fails on it.
 * @param {Document} doc
 * @param {string} chunk
 * @param {object} links
 * @param {boolean} open a streaming message's last chunk
 * @returns {Node[]}
 */
export function renderChunk(doc, chunk, links, open = false) {
  const fenced = FENCE.test(chunk);
  const limit = fenced ? MAX_CODE_CHARS : open ? STREAM_LEX_CHARS : MAX_CHUNK_CHARS;
  if (chunk.length > limit || (!fenced && nestingDepth(chunk) > MAX_NESTING)) return [plainChunk(doc, chunk)];
  try {
    const nodes = [];
    for (const t of lexChunk(chunk, links)) {
      const node = block(doc, t);
      if (node) nodes.push(node);
    }
    return nodes;
  } catch {
    return [plainChunk(doc, chunk)]; // a stack overflow in the lexer, or worse
  }
}

/**
 * Renders a growing text as Markdown into one element, rebuilding only the
 * chunks that changed since the last render (`chunks`: a streaming message
 * re-lexes its open chunk alone).
 */
export class MarkdownView {
  /**
   * @param {Document} doc
   * @param {Element} container emptied and owned by the view
   */
  constructor(doc, container) {
    this.doc = doc;
    this.container = container;
    this.container.replaceChildren();
    /** @type {Array<{raw: string, nodes: Node[], plain?: boolean, open?: boolean}>} */
    this.blocks = [];
    this.links = "";
    this.text = null;
    this.final = true;
  }

  /**
   * Show `text` (the whole text so far, not a delta).
   * @param {string} text
   * @param {{final?: boolean}} [options] `final: false` while it streams
   */
  render(text, { final = true } = {}) {
    if (text === this.text && final === this.final) return;
    this.text = text;
    this.final = final;
    try {
      this._render(text, final);
    } catch {
      // Whatever failed, the text is shown, and nothing else is touched.
      for (const old of this.blocks.splice(0)) for (const node of old.nodes) node.remove();
      const node = plainChunk(this.doc, text);
      this.blocks.push({ raw: text, nodes: [node] });
      this.links = "";
      this.container.append(node);
    }
  }

  _render(text, final) {
    if (isPlain(text)) {
      // Nothing Markdown could mean here: one paragraph, no lexing (most
      // answers while they stream, and a long session's many short ones).
      if (this.blocks.length === 1 && this.blocks[0].plain) {
        this.blocks[0].nodes[0].textContent = text;
        this.blocks[0].raw = text;
        return;
      }
      for (const old of this.blocks.splice(0)) for (const node of old.nodes) node.remove();
      const node = el(this.doc, "p", null, [text]);
      this.blocks.push({ raw: text, nodes: [node], plain: true });
      this.links = "{}";
      this.container.append(node);
      return;
    }
    const definitions = linkDefinitions(text);
    // A reference definition ([x]: url) changes links in other chunks.
    const links = JSON.stringify(definitions);
    const parts = chunks(text);
    let keep = 0;
    if (links === this.links) {
      while (
        keep < parts.length &&
        keep < this.blocks.length &&
        this.blocks[keep].raw === parts[keep] &&
        !this.blocks[keep].plain &&
        !(this.blocks[keep].open && (final || keep < parts.length - 1))
      )
        keep += 1;
    }
    this.links = links;
    for (const old of this.blocks.splice(keep)) for (const node of old.nodes) node.remove();
    const frag = this.doc.createDocumentFragment();
    parts.slice(keep).forEach((part, i) => {
      const open = !final && keep + i === parts.length - 1;
      const nodes = renderChunk(this.doc, part, definitions, open);
      this.blocks.push({ raw: part, nodes, open });
      frag.append(...nodes);
    });
    this.container.append(frag);
  }
}
