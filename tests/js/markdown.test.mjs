import assert from "node:assert/strict";
import { test } from "node:test";

import { decodeEntities, isPlain, lex, safeHref } from "../../static/js/markdown.js";

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
