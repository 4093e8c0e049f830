/**
 * A tool call's arguments as the transcript shows them: whole (`argsBlock`),
 * in one line (`argsSummary`), as its tool says (the registry's `display`)
 * or as JSON. Text, never markup: whatever a model put in an argument stays
 * inert.
 *
 * @module args
 */

import { h } from "./dom.js";

export function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/**
 * The arguments of a tool call, readable: as its tool says to show them (the
 * registry's `display`, sent with the call), else as JSON. A field is shown
 * as text, never as markup: whatever a model put in an argument stays inert.
 */
export function argsBlock(doc, display, args) {
  const a = args && typeof args === "object" ? args : {};
  if (!display) return h(doc, "pre", { class: "code" }, [h(doc, "code", { text: pretty(a) })]);
  return h(
    doc,
    "div",
    { class: "tool-args" },
    display.map((f) => {
      const value = pretty(a[f.arg] ?? "");
      if (f.as === "command") return h(doc, "pre", { class: "code code-cmd" }, [h(doc, "code", { text: `$ ${value}` })]);
      if (f.as === "block") return h(doc, "pre", { class: "code" }, [h(doc, "code", { text: value })]);
      return h(doc, "div", { class: "kv" }, [h(doc, "span", { class: "k", text: f.label || f.arg }), h(doc, "code", { class: "v", text: value })]);
    }),
  );
}

/** A one-line summary of a tool call's arguments: its first shown field, or its JSON. */
export function argsSummary(display, args) {
  const a = args && typeof args === "object" ? args : {};
  const first = display ? a[display[0].arg] : undefined;
  const text = (first !== undefined ? pretty(first) : pretty(a)).replace(/\s+/g, " ");
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
}

/** The built-in tools' display, for calls logged before tools sent their own. */
const BUILTIN_DISPLAY = {
  write_file: [
    { arg: "path", label: "path", as: "code" },
    { arg: "text", label: "", as: "block" },
  ],
  terminal: [{ arg: "command", label: "", as: "command" }],
};

export function legacyDisplay(item) {
  return item.display || BUILTIN_DISPLAY[item.tool] || null;
}
