/**
 * The transcript's branches on screen: which rows the active path shows
 * (the others stay built, hidden, so a switch back costs no rebuild) and the
 * controls on its messages (paths.js says which, rows.js builds them). Owned
 * by SessionView, which calls `update` after each batch it renders.
 *
 * @module branchview
 */

import { activePath, branchControls, extendsPath, isShown } from "../model/paths.js";
import { branchNav, regenerateButton } from "./rows.js";

export class BranchView {
  /**
   * @param {Document} doc
   * @param {Map<string, HTMLElement>} rows SessionView's rows, by item key
   */
  constructor(doc, rows) {
    this.doc = doc;
    this.rows = rows;
    /** @type {import("../model/paths.js").Path|null} the path the rows show */
    this.path = null;
    /** the control elements in the rows now */
    this.controls = [];
  }

  /** Everything is rebuilt (SessionView.reset): nothing shown is known. */
  reset() {
    this.path = null;
    this.controls = [];
  }

  /**
   * Bring the rows in line with the model after a batch.
   * @param {object} model
   * @param {Array<object>} added items whose rows were just built
   * @param {boolean} decorate whether controls may have changed (runs, path, rows)
   */
  update(model, added, decorate) {
    const path = activePath(model);
    if (extendsPath(this.path, path)) {
      // A new input at the end of the path: the rows shown before stay so.
      const fresh = new Set(path.order.slice(this.path.order.length));
      for (const item of added) this._show(item, path);
      if (fresh.size) for (const item of model.items) if (fresh.has(item.runId)) this._show(item, path);
    } else {
      for (const item of model.items) this._show(item, path);
    }
    const moved = !this.path || path.order.join() !== this.path.order.join();
    this.path = path;
    if (decorate || moved) this._decorate(model, path);
  }

  _show(item, path) {
    const el = this.rows.get(item.key);
    if (!el) return;
    const hidden = !isShown(item, path);
    if (el.hidden !== hidden) el.hidden = hidden;
  }

  _decorate(model, path) {
    for (const el of this.controls) el.remove();
    this.controls = [];
    for (const c of branchControls(model, path)) {
      const row = this.rows.get(c.key);
      if (!row) continue;
      let tools = row.querySelector(":scope > .msg-tools");
      if (!tools) {
        tools = this.doc.createElement("div");
        tools.className = "msg-tools";
        row.append(tools);
      }
      const el = c.kind === "regenerate" ? regenerateButton(this.doc, c.runId) : branchNav(this.doc, c);
      // The version switch first, then the actions (edit, regenerate).
      if (c.kind === "regenerate") tools.append(el);
      else tools.prepend(el);
      this.controls.push(el);
    }
  }
}
