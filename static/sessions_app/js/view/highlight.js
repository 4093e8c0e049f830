/**
 * Code highlighting for the Markdown renderer, loaded by `markdown.js` with
 * the first code block (a session without code never loads it).
 *
 * highlight.js escapes the code it marks up; its markup still passes
 * DOMPurify, spans with classes only, on its way into the DOM.
 *
 * @module highlight
 */

import DOMPurify from "../../vendor/dompurify/purify.es.mjs";
import hljs from "../../vendor/highlight/core.min.js";
import bash from "../../vendor/highlight/languages/bash.min.js";
import c from "../../vendor/highlight/languages/c.min.js";
import cpp from "../../vendor/highlight/languages/cpp.min.js";
import css from "../../vendor/highlight/languages/css.min.js";
import diff from "../../vendor/highlight/languages/diff.min.js";
import go from "../../vendor/highlight/languages/go.min.js";
import java from "../../vendor/highlight/languages/java.min.js";
import javascript from "../../vendor/highlight/languages/javascript.min.js";
import json from "../../vendor/highlight/languages/json.min.js";
import plaintext from "../../vendor/highlight/languages/plaintext.min.js";
import python from "../../vendor/highlight/languages/python.min.js";
import rust from "../../vendor/highlight/languages/rust.min.js";
import shell from "../../vendor/highlight/languages/shell.min.js";
import sql from "../../vendor/highlight/languages/sql.min.js";
import typescript from "../../vendor/highlight/languages/typescript.min.js";
import xml from "../../vendor/highlight/languages/xml.min.js";
import yaml from "../../vendor/highlight/languages/yaml.min.js";

const LANGUAGES = { bash, c, cpp, css, diff, go, java, javascript, json, plaintext, python, rust, shell, sql, typescript, xml, yaml };
for (const [name, grammar] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, grammar);

/** Past this many characters a code block stays plain: it may be highlighted every frame. */
export const MAX_HIGHLIGHT_CHARS = 20_000;

/**
 * Replace `code`'s content with `text` highlighted as `lang`, if highlight.js
 * knows the language and the text is not too long; otherwise leave it.
 * @param {Element} code
 * @param {string} text
 * @param {string} lang
 */
export function highlightInto(code, text, lang) {
  if (!hljs.getLanguage(lang) || text.length > MAX_HIGHLIGHT_CHARS) return;
  const html = hljs.highlight(text, { language: lang, ignoreIllegals: true }).value;
  const clean = DOMPurify.sanitize(html, { ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"], RETURN_DOM_FRAGMENT: true });
  code.className = `hljs language-${lang}`;
  code.replaceChildren(clean);
}
