import assert from "node:assert/strict";
import { test } from "node:test";

import { decodeEntities, isPlain, lex, safeHref } from "../../static/sessions_app/js/view/markdown.js";

test("links keep only absolute http(s) and mailto destinations", () => {
  assert.equal(safeHref("https://example.com/a?b=1"), "https://example.com/a?b=1");
  assert.equal(safeHref(" HTTP://Example.com "), "http://example.com/");
  assert.equal(safeHref("mailto:a@example.com"), "mailto:a@example.com");
  for (const bad of [
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    " javascript:alert(1)",
    "java\nscript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "vbscript:msgbox",
    "//evil.example/x",
    "/relative",
    "#top",
    "file:///etc/passwd",
    "https//missing-colon",
    "",
    null,
  ]) {
    assert.equal(safeHref(bad), null, String(bad));
  }
});

test("character references decode; anything else stays as written", () => {
  assert.equal(decodeEntities("a &amp; b &lt;c&gt; &quot;d&quot; &#39;e&#39; &#x41;"), "a & b <c> \"d\" 'e' A");
  assert.equal(decodeEntities("&nosuch; & &#0; &#xD800;"), "&nosuch; & \ufffd \ufffd");
  assert.equal(decodeEntities("plain"), "plain");
});

test("a growing text lexes to the same leading blocks (what the view keeps)", () => {
  const full = "# Title\n\nFirst paragraph.\n\n- one\n- two\n\n```js\nlet x = 1;\n```\n";
  const whole = lex(full).map((t) => t.raw);
  for (let n = 1; n < full.length; n += 1) {
    const part = lex(full.slice(0, n)).map((t) => t.raw);
    // Every block but the last of a prefix is final: the same source as in the whole text.
    for (let i = 0; i < part.length - 2; i += 1) assert.equal(part[i], whole[i], `prefix ${n}, block ${i}`);
  }
});

test("raw HTML is lexed as html tokens (which the view shows as text)", () => {
  const kinds = lex("<script>alert(1)</script>\n\nhi <b>x</b>").flatMap((t) => [t.type, ...(t.tokens || []).map((i) => i.type)]);
  assert.deepEqual(kinds, ["html", "space", "paragraph", "text", "html", "text", "html"]);
});

test("plain text is one paragraph of itself: the lexer agrees wherever the fast path is taken", () => {
  const samples = [
    "You said: hello there. This is the scripted demo agent.",
    "Wrote to notes.txt: appended 6 bytes",
    "A sentence, with commas; colons: and (parentheses) and 'quotes' and \"double\" ones?",
    "tok0 tok1 tok2 ",
    "émoji 🎉 and ünïcode",
  ];
  for (const text of samples) {
    assert.ok(isPlain(text), text);
    const tokens = lex(text);
    assert.deepEqual(
      tokens.map((t) => [t.type, t.tokens?.map((i) => [i.type, i.text])]),
      [["paragraph", [["text", text]]]],
      text,
    );
  }
  for (const text of [
    "**bold**",
    "a_b",
    "see https://example.com",
    "www.example.com",
    "mail a@example.com",
    "1. item",
    "- item",
    "> quote",
    "# title",
    "    code",
    "line\nbreak",
    "a <b> tag",
    "&amp;",
    "",
    "= not a heading?",
    "x | y",
    "~~gone~~",
    "![i](x)",
    "back\\slash",
  ]) {
    assert.ok(!isPlain(text), text);
  }
});

import { chunks, linkDefinitions, MAX_NESTING, MarkdownView, nestingDepth, renderChunk } from "../../static/sessions_app/js/view/markdown.js";

/** Just enough of a DOM for the renderer: elements with attributes, children and text. */
class FakeNode {
  constructor(tag) {
    this.tagName = tag;
    this.attributes = {};
    this.children = [];
    this.parent = null;
    this.text = "";
    this.dataset = {};
  }
  setAttribute(k, v) {
    this.attributes[k] = String(v);
  }
  removeAttribute(k) {
    delete this.attributes[k];
  }
  addEventListener() {}
  append(...nodes) {
    for (const n of nodes) {
      if (n instanceof FakeNode && n.tagName === "#fragment") {
        this.append(...n.children);
        n.children = [];
        continue;
      }
      const child = n instanceof FakeNode ? n : Object.assign(new FakeNode("#text"), { text: String(n) });
      child.parent = this;
      this.children.push(child);
    }
  }
  replaceChildren(...nodes) {
    this.children = [];
    this.append(...nodes);
  }
  remove() {
    if (this.parent) this.parent.children = this.parent.children.filter((c) => c !== this);
    this.parent = null;
  }
  get textContent() {
    return this.tagName === "#text" ? this.text : this.children.map((c) => c.textContent).join("");
  }
  set textContent(v) {
    this.children = [];
    this.append(String(v));
  }
  get isConnected() {
    return false;
  }
}
const fakeDoc = {
  createElement: (tag) => new FakeNode(tag),
  createDocumentFragment: () => new FakeNode("#fragment"),
  defaultView: null,
};

test("chunks cut at blank lines and around fences, and lose nothing", () => {
  const text = "# T\n\nOne **para**.\n\n1. item\n\n   continued\n2. next\n\n```py\nx = 1\n\ny = 2\n```\nafter\n\n> quote\n";
  const parts = chunks(text);
  assert.equal(parts.join(""), text);
  assert.ok(parts.includes("```py\nx = 1\n\ny = 2\n```\n"), "a fence is one chunk, blank lines and all");
  assert.ok(
    parts.some((p) => p.includes("1. item\n\n   continued\n2. next")),
    "a list stays whole",
  );
  assert.equal(chunks("```\nopen fence\n\nstill code").length, 1, "an open fence runs to the end");
});

test("typical answers render the same blocks chunked as whole", () => {
  const texts = [
    "Here is a plan:\n\n1. **Read** the file\n\n   It is long.\n2. Write\n\n```js\nlet a = 1;\n```\n\nDone. See [the docs][d].\n\n[d]: https://example.com/docs",
    "# Heading\n\nText with `code` and a table:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> quoted\n> more\n\n- x\n- y\n",
  ];
  for (const text of texts) {
    const whole = lex(text)
      .map((t) => t.type)
      .filter((t) => t !== "space" && t !== "def");
    const links = linkDefinitions(text);
    const chunked = chunks(text).flatMap((c) => renderChunk(fakeDoc, c, links).map((n) => n.tagName));
    assert.equal(chunked.length, whole.length, text);
  }
  const links = linkDefinitions("x\n\n[D]: https://example.com/d 'T'\n");
  assert.deepEqual(links, { d: { href: "https://example.com/d", title: "T" } });
});

test("hostile Markdown renders as plain text, never throws, never nests past the bound", () => {
  const hostile = [
    ">".repeat(5000),
    Array.from({ length: 1200 }, (_, i) => `${"  ".repeat(i)}- item`).join("\n"),
    `${"- ".repeat(1200)}deep`,
    "*".repeat(2200),
    "*a _b ".repeat(12_000),
    "x".repeat(70_000),
  ];
  for (const text of hostile) {
    const nodes = chunks(text).flatMap((c) => renderChunk(fakeDoc, c, {}));
    assert.ok(nodes.length > 0, "something is shown (a rule, for a line of stars)");
  }
  assert.ok(nestingDepth(">".repeat(5000)) > MAX_NESTING);
  assert.equal(renderChunk(fakeDoc, ">".repeat(5000), {})[0].attributes["data-md"], "plain");
  assert.equal(nestingDepth("> a\n> > b\n- c\n  - d"), 2);
});

test("a view shows every message's text, hostile or not, and re-lexes only the open chunk", () => {
  const box = new FakeNode("div");
  const view = new MarkdownView(fakeDoc, box);
  view.render(">".repeat(5000));
  assert.equal(box.textContent, ">".repeat(5000));
  const other = new FakeNode("div");
  const streaming = new MarkdownView(fakeDoc, other);
  streaming.render("# A\n\nfirst", { final: false });
  const heading = other.children[0];
  streaming.render("# A\n\nfirst part\n\nsecond", { final: false });
  assert.equal(other.children[0], heading, "a closed chunk keeps its nodes");
  streaming.render(`# A\n\nfirst part\n\n${"w ".repeat(3000)}`, { final: false });
  assert.equal(other.children.at(-1).attributes["data-md"], "plain", "a long open chunk waits, plain");
  streaming.render(`# A\n\nfirst part\n\n${"w ".repeat(3000)}`, { final: true });
  assert.equal(other.children.at(-1).tagName, "p");
  assert.equal(other.children.at(-1).attributes["data-md"], undefined, "rendered once final");
});

test("a fake fence does not escape the limits", () => {
  const text = `\`\`\`a\`\n${">".repeat(5000)}`;
  assert.equal(chunks(text).length, 1);
  assert.equal(renderChunk(fakeDoc, text, {})[0].attributes["data-md"], "plain");
  assert.equal(chunks("```py\nx\n```\nafter").length, 2, "a real fence is its own chunk");
});
