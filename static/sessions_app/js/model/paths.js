/**
 * What the conversation's tree (transcript.js: runs' `parent` and `answers`,
 * the model's `leaf`) means for the display, no DOM: the active path, which
 * items it shows, and the branch controls each message gets.
 *
 * @module paths
 */

/**
 * @typedef {object} Path
 * @property {Set<string>} runs the runs from the root to the leaf
 * @property {Set<string>} answers the runs whose user.message the path shows
 * @property {string[]} order the path's runs, root first
 */

/**
 * The active path: from the leaf up through its parents.
 * @param {object} model
 * @returns {Path}
 */
export function activePath(model) {
  const runs = new Set();
  const answers = new Set();
  const order = [];
  let r = model.leaf;
  while (r && model.runs[r] && !runs.has(r)) {
    runs.add(r);
    answers.add(model.runs[r].answers || r);
    order.push(r);
    r = model.runs[r].parent;
  }
  order.reverse();
  return { runs, answers, order };
}

/**
 * Whether the path shows `item`: a user message if a run of the path answers
 * it, a run's row if its run is on the path, anything else always. Before the
 * first input (no leaf) everything shows.
 * @param {{type: string, runId?: string|null}} item
 * @param {Path} path
 * @returns {boolean}
 */
export function isShown(item, path) {
  if (!item.runId || path.order.length === 0) return true;
  return item.type === "user" ? path.answers.has(item.runId) : path.runs.has(item.runId);
}

/**
 * Whether `next` only adds runs at the end of `prev` (a new input): the rows
 * shown before still show, so only the new runs' rows need a look.
 * @param {Path|null} prev
 * @param {Path} next
 * @returns {boolean}
 */
export function extendsPath(prev, next) {
  if (!prev || prev.order.length > next.order.length) return false;
  return prev.order.every((r, i) => next.order[i] === r);
}

/**
 * @typedef {object} Control
 * @property {"user"|"answer"|"regenerate"} kind
 * @property {string} key the item whose row holds it
 * @property {string} runId the run it is about (the one shown)
 * @property {number} [index] 1-based, the sibling shown
 * @property {number} [count] how many siblings
 * @property {string|null} [prev] the run to switch to for the previous sibling
 * @property {string|null} [next] ... for the next one
 */

/**
 * The branch controls of the path's messages: a "‹ i/n ›" where a user
 * message has other versions (edits) or an answer has siblings
 * (regenerates), and "regenerate" on the leaf's answer once its run ended.
 * @param {object} model
 * @param {Path} path
 * @returns {Control[]}
 */
export function branchControls(model, path) {
  const groups = new Map();
  for (const [id, run] of Object.entries(model.runs)) {
    if (!run.grown) continue;
    const key = run.parent || "";
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(id);
  }
  const byOrder = (a, b) => model.runs[a].order - model.runs[b].order;
  const out = [];
  for (const r of path.order) {
    const run = model.runs[r];
    const siblings = (groups.get(run.parent || "") || []).sort(byOrder);
    // Versions of the message: one per distinct `answers`, each reached
    // through its newest run.
    const versions = [];
    const newest = new Map();
    for (const s of siblings) {
      const a = model.runs[s].answers || s;
      if (!newest.has(a)) versions.push(a);
      newest.set(a, s);
    }
    const answered = run.answers || r;
    const userItem = itemOf(model, model.idx.user[model.runs[answered]?.cmid]);
    if (versions.length > 1 && userItem) {
      const i = versions.indexOf(answered);
      out.push({
        kind: "user",
        key: userItem.key,
        runId: r,
        index: i + 1,
        count: versions.length,
        prev: i > 0 ? newest.get(versions[i - 1]) : null,
        next: i < versions.length - 1 ? newest.get(versions[i + 1]) : null,
      });
    }
    const answers = siblings.filter((s) => (model.runs[s].answers || s) === answered);
    const answerItem = itemOf(model, model.idx.seg[r] ?? model.idx.lastOfRun[r]);
    if (answers.length > 1 && answerItem && answerItem.type !== "user") {
      const i = answers.indexOf(r);
      out.push({
        kind: "answer",
        key: answerItem.key,
        runId: r,
        index: i + 1,
        count: answers.length,
        prev: i > 0 ? answers[i - 1] : null,
        next: i < answers.length - 1 ? answers[i + 1] : null,
      });
    }
    if (r === model.leaf && run.status === "finished" && answerItem && answerItem.type !== "user") {
      out.push({ kind: "regenerate", key: answerItem.key, runId: r });
    }
  }
  return out;
}

function itemOf(model, index) {
  return index === undefined ? null : model.items[index] || null;
}
