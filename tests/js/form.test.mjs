// view/form.js: a question's form as a card shows it, and what it answers.
import assert from "node:assert/strict";
import { test } from "node:test";

import { answerList, buildForm, formOf, localInput, readForm } from "../../static/sessions_app/js/view/form.js";
import { fakeDocument } from "./fakedom.mjs";

const SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", title: "Name", description: "<b>as written</b>" },
    email: { type: "string", format: "email" },
    age: { type: "integer", minimum: 1, maximum: 150 },
    plan: { type: "string", enum: ["free", "team"], enumNames: ["Free", "Team"], default: "free" },
    news: { type: "boolean", title: "News", default: false },
  },
  required: ["name"],
};

test("a form is found only in a question's args with properties", () => {
  assert.equal(formOf({ message: "m", schema: SCHEMA }), SCHEMA);
  assert.equal(formOf({ message: "m" }), null);
  assert.equal(formOf({ schema: { type: "object" } }), null);
  assert.equal(formOf(null), null);
});

test("each property is one labelled field of its kind, in order, as text", () => {
  const doc = fakeDocument();
  const form = buildForm(doc, SCHEMA, false);
  assert.equal(form.getAttribute("novalidate"), ""); // the server checks, and says
  const fields = form.querySelectorAll("[data-field]");
  assert.deepEqual(
    fields.map((f) => [f.dataset.field, f.tagName, f.getAttribute("type")]),
    [
      ["name", "INPUT", "text"],
      ["email", "INPUT", "email"],
      ["age", "INPUT", "number"],
      ["plan", "SELECT", null],
      ["news", "INPUT", "checkbox"],
    ],
  );
  assert.equal(fields[2].getAttribute("step"), "1");
  assert.equal(fields[2].getAttribute("max"), "150");
  const labels = form.querySelectorAll(".form-label").map((l) => l.textContent);
  assert.deepEqual(labels, ["Name *", "email", "age", "plan", "News"]);
  assert.equal(form.querySelector(".form-hint").children[0].tagName, "#TEXT"); // never markup
  const options = fields[3].querySelectorAll("option");
  assert.deepEqual(
    options.map((o) => [o.getAttribute("value"), o.textContent, o.getAttribute("selected")]),
    [
      ["", "Choose…", null],
      ["free", "Free", ""],
      ["team", "Team", null],
    ],
  );
  assert.ok(
    buildForm(doc, SCHEMA, true)
      .querySelectorAll("[data-field]")
      .every((f) => f.disabled),
  );
});

test("a form starts at what approving answers, over the fields' own defaults", () => {
  const doc = fakeDocument();
  const sure = { type: "object", properties: { sure: { type: "boolean" }, plan: SCHEMA.properties.plan } };
  const form = buildForm(doc, sure, false, { sure: true, plan: "team" });
  const [tick, plan] = form.querySelectorAll("[data-field]");
  assert.equal(tick.getAttribute("checked"), "");
  assert.deepEqual(
    plan.querySelectorAll("option").map((o) => o.getAttribute("selected")),
    [null, null, ""],
  );
});

test("a form answers its fields typed, leaving empty ones out", () => {
  const doc = fakeDocument();
  const card = doc.createElement("section");
  card.append(buildForm(doc, SCHEMA, false));
  const field = (name) => card.querySelector(`[data-field=${name}]`);
  field("name").value = "Ada";
  field("email").value = "";
  field("age").value = "36";
  field("plan").value = "team";
  field("news").checked = true;
  assert.deepEqual(readForm(card), { name: "Ada", age: 36, plan: "team", news: true });
});

test("an answer is shown as each field's title and its value", () => {
  const doc = fakeDocument();
  const list = answerList(doc, SCHEMA, { name: "Ada", plan: "team", news: false });
  assert.deepEqual(
    list.children.map((c) => c.textContent),
    ["Name", "Ada", "plan", "Team", "News", "No"],
  );
});

test("any field name is an own property, and a date-time goes as UTC", () => {
  const doc = fakeDocument();
  const schema = {
    type: "object",
    // Parsed, as the wire gives it: an own property named __proto__ (a literal would set the prototype).
    properties: JSON.parse('{"__proto__": {"type": "string"}, "at": {"type": "string", "format": "date-time", "default": "2026-12-07T21:30:00Z"}}'),
  };
  const card = doc.createElement("section");
  card.append(buildForm(doc, schema, false));
  const [proto, at] = card.querySelectorAll("[data-field]");
  assert.equal(at.getAttribute("type"), "datetime-local");
  assert.equal(at.value, localInput("2026-12-07T21:30:00Z"));
  proto.value = "kept";
  const answer = readForm(card);
  assert.ok(Object.hasOwn(answer, "__proto__"));
  assert.equal(Object.getOwnPropertyDescriptor(answer, "__proto__").value, "kept");
  assert.equal(answer.at, "2026-12-07T21:30:00.000Z");
});
