/**
 * The DOM helper the pages' modules share.
 *
 * @module dom
 */

/**
 * Create an element.
 * @param {Document} doc
 * @param {string} tag
 * @param {Record<string, string|number|boolean|null|undefined>} [attrs] "class", "text", data-*, aria-*, ...
 * @param {Array<Node|string>} [children]
 * @returns {HTMLElement}
 */
export function h(doc, tag, attrs = {}, children = []) {
  const el = doc.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = String(v);
    else if (k === "text") el.textContent = String(v);
    else if (k === "hidden") el.hidden = true;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) el.append(c);
  return el;
}
