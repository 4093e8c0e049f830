// Just enough of a DOM for the view tests: elements with attributes, dataset,
// children, text, a few properties, events, and querySelector for the
// selectors the client uses (tag, .class, [attr], [attr=value], combined).
// No npm dependencies.

const camel = (name) => name.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
const kebab = (name) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

export class FakeNode {
  constructor(tag, doc = null) {
    this.tagName = tag.toUpperCase();
    this.ownerDocument = doc;
    this.attributes = new Map();
    this.children = [];
    this.parent = null;
    this.text = "";
    this.listeners = {};
    this.hidden = false;
    this.disabled = false;
    this.scrollTop = 0;
    this.scrollHeight = 0;
    this.clientHeight = 0;
    this.dataset = new Proxy(
      {},
      {
        get: (_, key) => this.getAttribute(`data-${kebab(String(key))}`) ?? undefined,
        set: (_, key, value) => {
          this.setAttribute(`data-${kebab(String(key))}`, value);
          return true;
        },
        deleteProperty: (_, key) => {
          this.removeAttribute(`data-${kebab(String(key))}`);
          return true;
        },
        has: (_, key) => this.attributes.has(`data-${kebab(String(key))}`),
        ownKeys: () =>
          Array.from(this.attributes.keys())
            .filter((k) => k.startsWith("data-"))
            .map((k) => camel(k.slice(5))),
        getOwnPropertyDescriptor: () => ({ enumerable: true, configurable: true }),
      },
    );
  }
  get className() {
    return this.getAttribute("class") ?? "";
  }
  set className(v) {
    this.setAttribute("class", v);
  }
  get classList() {
    const classes = () => this.className.split(/\s+/).filter(Boolean);
    return { contains: (c) => classes().includes(c) };
  }
  setAttribute(k, v) {
    this.attributes.set(k, String(v));
  }
  getAttribute(k) {
    return this.attributes.has(k) ? this.attributes.get(k) : null;
  }
  removeAttribute(k) {
    this.attributes.delete(k);
  }
  addEventListener(type, fn) {
    if (!this.listeners[type]) this.listeners[type] = [];
    this.listeners[type].push(fn);
  }
  dispatch(type, event = {}) {
    for (const fn of this.listeners[type] || []) fn({ target: this, ...event });
  }
  focus() {
    if (this.ownerDocument) this.ownerDocument.activeElement = this;
  }
  append(...nodes) {
    for (const n of nodes) {
      if (n instanceof FakeNode && n.tagName === "#FRAGMENT") {
        this.append(...n.children);
        n.children = [];
        continue;
      }
      const child = n instanceof FakeNode ? n : Object.assign(new FakeNode("#text"), { text: String(n) });
      if (child.parent) child.remove();
      child.parent = this;
      this.children.push(child);
    }
  }
  prepend(...nodes) {
    const rest = this.children;
    this.children = [];
    this.append(...nodes);
    for (const c of rest) this.children.push(c);
  }
  replaceChildren(...nodes) {
    for (const c of this.children) c.parent = null;
    this.children = [];
    this.append(...nodes);
  }
  replaceWith(node) {
    const parent = this.parent;
    if (!parent) return;
    const i = parent.children.indexOf(this);
    if (node.parent) node.remove();
    parent.children.splice(i, 1, node);
    node.parent = parent;
    this.parent = null;
  }
  remove() {
    if (this.parent) this.parent.children = this.parent.children.filter((c) => c !== this);
    this.parent = null;
  }
  contains(node) {
    for (let n = node; n; n = n.parent) if (n === this) return true;
    return false;
  }
  get childNodes() {
    return this.children;
  }
  get textContent() {
    return this.tagName === "#TEXT" ? this.text : this.children.map((c) => c.textContent).join("");
  }
  set textContent(v) {
    this.replaceChildren(String(v));
  }
  get isConnected() {
    let n = this;
    while (n.parent) n = n.parent;
    return n.tagName === "#DOCUMENT";
  }
  *descendants() {
    for (const c of this.children) {
      yield c;
      yield* c.descendants();
    }
  }
  querySelectorAll(selector) {
    const scoped = /^:scope\s*>\s*(.+)$/.exec(selector.trim());
    if (scoped) {
      const child = compile(scoped[1]);
      return this.children.filter((n) => n.tagName !== "#TEXT" && child(n));
    }
    const match = compile(selector);
    return Array.from(this.descendants()).filter((n) => n.tagName !== "#TEXT" && match(n));
  }
  querySelector(selector) {
    return this.querySelectorAll(selector)[0] ?? null;
  }
}

/** A matcher for a simple selector: tag, .class and [attr] / [attr=value] / [attr="value"], combined. */
function compile(selector) {
  const re = /^([a-zA-Z][\w-]*)?((?:\.[\w-]+|\[[\w-]+(?:=(?:"[^"]*"|[^\]]*))?\])*)$/;
  const m = re.exec(selector.trim());
  if (!m) throw new Error(`fakedom cannot match ${selector}`);
  const tag = m[1]?.toUpperCase();
  const parts = [];
  for (const p of m[2].match(/\.[\w-]+|\[[^\]]+\]/g) || []) {
    if (p.startsWith(".")) parts.push((n) => n.classList.contains(p.slice(1)));
    else {
      const [, name, eq, , value] = /^\[([\w-]+)(=("?)([^"\]]*)\3)?\]$/.exec(p);
      parts.push((n) => n.attributes.has(name) && (!eq || n.getAttribute(name) === value));
    }
  }
  return (n) => (!tag || n.tagName === tag) && parts.every((f) => f(n));
}

/** A document whose body holds `build(doc)`'s nodes. */
export function fakeDocument() {
  const doc = new FakeNode("#document");
  doc.ownerDocument = doc;
  doc.activeElement = null;
  doc.title = "";
  doc.defaultView = null;
  doc.createElement = (tag) => new FakeNode(tag, doc);
  doc.createDocumentFragment = () => new FakeNode("#fragment", doc);
  doc.createTextNode = (text) => Object.assign(new FakeNode("#text", doc), { text: String(text) });
  return doc;
}
