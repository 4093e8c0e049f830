/**
 * A question's form (approval.requested `args.schema`, the subset the server
 * checks: sessions_app/wire/forms.py): one labelled field per property, a
 * text box, an email, link, date or date-and-time box, a choice, a number or
 * a checkbox, its default filled in. The form checks nothing itself
 * (`novalidate`): the server's check is the one answer, and its refusal
 * names each field. Labels, hints and choices are text, never markup.
 *
 * @module form
 */

import { h } from "./dom.js";

const INPUT_OF_FORMAT = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };

/** Is `args` a question's form the cards render (an object of properties)? */
export function formOf(args) {
  const schema = args && typeof args === "object" ? args.schema : null;
  return schema && typeof schema === "object" && schema.properties && typeof schema.properties === "object" ? schema : null;
}

function control(d, name, prop, label, start) {
  const attrs = { "data-testid": `form-${name}`, "data-field": name, "data-type": prop.type, "data-format": prop.format || null, name, "aria-label": label };
  if (prop.type === "boolean") {
    return h(d, "input", { ...attrs, type: "checkbox", checked: start === true });
  }
  if (Array.isArray(prop.enum)) {
    const names = Array.isArray(prop.enumNames) ? prop.enumNames : prop.enum;
    const options = prop.enum.map((value, i) => h(d, "option", { value: String(value), text: String(names[i] ?? value), selected: value === start }));
    return h(d, "select", { ...attrs, class: "form-input" }, [h(d, "option", { value: "", text: "Choose…" }), ...options]);
  }
  const number = prop.type === "number" || prop.type === "integer";
  const type = number ? "number" : INPUT_OF_FORMAT[prop.format] || "text";
  const el = h(d, "input", {
    ...attrs,
    class: "form-input",
    type,
    step: prop.type === "integer" ? "1" : number ? "any" : null,
    min: prop.minimum ?? null,
    max: prop.maximum ?? null,
    maxlength: prop.maxLength ?? null,
  });
  if (start !== undefined && start !== null) el.value = prop.format === "date-time" ? localInput(start) : String(start);
  return el;
}

/** An RFC 3339 date-time as a datetime-local box shows it (the browser's time zone). */
export function localInput(value) {
  const at = new Date(String(value));
  if (Number.isNaN(at.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
}

/**
 * The form of a pending question, its fields in the schema's order.
 * @param {Document} d
 * @param {object} schema
 * @param {boolean} disabled
 * @param {object|null} [answers] what approving answers (`args.answer`): the fields start so
 * @returns {HTMLElement}
 */
export function buildForm(d, schema, disabled, answers = null) {
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = Object.entries(schema.properties).map(([name, prop]) => {
    const p = prop && typeof prop === "object" ? prop : {};
    const label = String(p.title || name);
    // What approving would answer (the server's defaults, a required yes/no
    // ticked), else the field's own default.
    const start = answers && Object.hasOwn(answers, name) ? answers[name] : p.default;
    const input = control(d, name, p, label, start);
    input.disabled = disabled;
    const caption = h(d, "span", { class: "form-label", text: `${label}${required.has(name) ? " *" : ""}` });
    const hint = p.description ? h(d, "span", { class: "form-hint", text: String(p.description) }) : null;
    const parts = p.type === "boolean" ? [input, caption, hint] : [caption, hint, input];
    return h(d, "label", { class: `form-field form-${p.type === "boolean" ? "check" : "line"}` }, parts);
  });
  return h(d, "form", { class: "approval-form", "data-testid": "question-form", novalidate: true }, fields);
}

/**
 * What a card's form answers: each field typed, left out when empty (the
 * server then says which required one is missing).
 * @param {Element} card
 * @returns {Record<string, string|number|boolean>}
 */
export function readForm(card) {
  const answer = [];
  for (const el of card.querySelectorAll("[data-field]")) {
    const name = el.dataset.field;
    if (el.dataset.type === "boolean") answer.push([name, el.checked]);
    else if (el.value === "") continue;
    else if (el.dataset.type === "number" || el.dataset.type === "integer") answer.push([name, Number(el.value)]);
    else if (el.dataset.format === "date-time") answer.push([name, utc(el.value)]);
    else answer.push([name, el.value]);
  }
  // Own properties, whatever the names (a field named __proto__ included).
  return Object.fromEntries(answer);
}

/** A datetime-local box's value (the browser's time zone) as RFC 3339, in UTC. */
function utc(value) {
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? value : at.toISOString();
}

/** A value as its field shows it: a choice by its name, a yes/no in words. */
function shown(prop, value) {
  if (typeof value === "boolean") return value ? "Yes" : "No";
  const at = Array.isArray(prop?.enum) ? prop.enum.indexOf(value) : -1;
  if (at >= 0 && Array.isArray(prop.enumNames) && prop.enumNames[at] !== undefined) return String(prop.enumNames[at]);
  return String(value);
}

/** A question's answer, shown once it is decided: each field and its value. */
export function answerList(d, schema, answer) {
  const props = schema?.properties ?? {};
  return h(
    d,
    "dl",
    { class: "form-answer", "data-testid": "form-answer" },
    Object.entries(answer).flatMap(([name, value]) => [
      h(d, "dt", { text: String(props[name]?.title || name) }),
      h(d, "dd", { "data-field": name, text: shown(props[name], value) }),
    ]),
  );
}
