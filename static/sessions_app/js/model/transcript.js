/**
 * The transcript model: what a session's events mean for the display, as a
 * plain JSON object (so it can be stored next to its cursor), and a reducer
 * that applies one event to it and says what changed.
 *
 * No DOM here; ui.js renders the model and the changes.
 *
 * Items (one per rendered row, each with the seq of the event that created it):
 *   note       session.created
 *   user       user.message                    {cmid, text, runId}
 *   assistant  first assistant.delta/message   {runId, text, final}
 *              of a segment (a run's text between tool calls is one segment)
 *   tool       tool.call                       {toolCallId, tool, args, runId}
 *   approval   approval.requested              {approvalId, toolCallId, tool, args,
 *                                               note, kind, step, expiresAt, stepPending, status,
 *                                               decision, decidedBy, reason, editedArgs,
 *                                               response, answer, runId}
 *   result     tool.result                     {toolCallId, ok, output, runId}
 *   notice     run.finished other than end_turn {runId, stop, message}
 *   resumed    run.resumed (once a run)        {runId, reason}: "resumed after
 *              a server restart"; the run's text segment is cut back to the
 *              checkpoint's `keep` characters
 *
 * The conversation's tree (docs/protocol.md, "Branches"): every run has a
 * `parent` (the run its turn follows; null for the first) and `answers` (the
 * run whose user.message it answers: itself, or the one a regenerate
 * answers again); `leaf` ends the active path. A plain user.message follows
 * the leaf before it, and a new run becomes the leaf; branch.switched moves
 * it. What is shown is the path (paths.js); every item stays in the model.
 *
 * @module transcript
 */

import * as P from "../wire/constants.js";

export const MODEL_VERSION = 2;

/** @returns {object} a model with nothing applied (cursor 0) */
export function emptyModel() {
  return {
    v: MODEL_VERSION,
    title: "",
    items: [],
    runs: {},
    leaf: null,
    order: 0,
    idx: { user: {}, seg: {}, tool: {}, approval: {}, lastOfRun: {} },
  };
}

/**
 * Whether a model restored from storage has the expected shape.
 * @param {unknown} model
 * @returns {boolean}
 */
export function isModel(model) {
  return (
    !!model &&
    typeof model === "object" &&
    model.v === MODEL_VERSION &&
    Array.isArray(model.items) &&
    Number.isInteger(model.order) &&
    !!model.runs &&
    !!model.idx &&
    ["user", "seg", "tool", "approval", "lastOfRun"].every((k) => model.idx[k] && typeof model.idx[k] === "object")
  );
}

function str(value) {
  return typeof value === "string" ? value : value == null ? "" : String(value);
}

/** A tool's own way of showing its arguments (the registry's `display`), or null. */
function displayOf(d) {
  if (!Array.isArray(d.display)) return null;
  const fields = d.display.filter((f) => f && typeof f === "object" && typeof f.arg === "string");
  return fields.length ? fields.map((f) => ({ arg: f.arg, label: str(f.label), as: str(f.as) || "code" })) : null;
}

/** A card's status after its approval.decided's decision. */
const STATUS_OF = {
  [P.APPROVE]: "approved",
  [P.EDIT]: "edited",
  [P.DENY]: "denied",
  [P.RESPOND]: "answered",
  [P.ANSWER]: "answered",
  [P.GATE_EXPIRED]: "expired",
  [P.GATE_CANCELLED]: "cancelled",
};

/**
 * The gates of one step (opened together) each know how many of the step
 * still wait (`stepPending`), so that their cards offer Approve all / Deny
 * all while more than one does.
 */
function countStep(model, step, changes) {
  if (!step) return;
  const cards = model.items.filter((it) => it.type === "approval" && it.step === step);
  const pending = cards.filter((it) => it.status === "pending").length;
  for (const card of cards) {
    if (card.stepPending === pending) continue;
    card.stepPending = pending;
    changes.push({ op: "update", item: card });
  }
}

function addItem(model, item, changes) {
  const i = model.items.length;
  model.items.push(item);
  if (item.runId) model.idx.lastOfRun[item.runId] = i;
  changes.push({ op: "add", item });
  return i;
}

function runOf(model, runId) {
  if (!runId) return null;
  if (!model.runs[runId]) {
    model.order += 1;
    model.runs[runId] = { status: "running", cmid: null, seq: 0, stop: null, parent: null, answers: runId, order: model.order };
  }
  return model.runs[runId];
}

/** A new turn: `run` follows `parent` and is the leaf now. */
function growTree(model, runId, run, parent, answers, changes) {
  if (run.grown) return;
  run.grown = true;
  run.parent = parent && parent !== runId ? parent : null;
  run.answers = answers || runId;
  model.leaf = runId;
  changes.push({ op: "path" });
}

/**
 * The assistant segment that text of `runId` goes into: the run's last item
 * if it is an unfinished assistant segment, else a new one.
 */
function segmentFor(model, ev, changes) {
  const runId = ev.run_id || "";
  const si = model.idx.seg[runId];
  if (si !== undefined && model.idx.lastOfRun[runId] === si && !model.items[si].final) {
    return model.items[si];
  }
  const item = { key: `a${ev.seq}`, seq: ev.seq, type: "assistant", runId, text: "", final: false };
  model.idx.seg[runId] = addItem(model, item, changes);
  return item;
}

/**
 * What each event kind does to the model: one small handler per kind, each
 * `(model, ev, d, runId, changes)` with `d` the event's data (an object) and
 * `runId` its run or null. A handler mutates the model and pushes changes.
 */
export const HANDLERS = {
  [P.K_SESSION_CREATED](model, ev, d, _runId, changes) {
    model.title = str(d.title);
    addItem(model, { key: `n${ev.seq}`, seq: ev.seq, type: "note", text: "Session started" }, changes);
    changes.push({ op: "title" });
  },

  [P.K_USER_MESSAGE](model, ev, d, runId, changes) {
    const cmid = str(d.client_message_id);
    if (cmid && model.idx.user[cmid] !== undefined) return; // once per id, by protocol
    const item = { key: `u${ev.seq}`, seq: ev.seq, type: "user", cmid, text: str(d.text), runId };
    const i = addItem(model, item, changes);
    if (cmid) model.idx.user[cmid] = i;
    const leaf = model.leaf;
    const run = runOf(model, runId);
    if (run) {
      run.cmid = cmid;
      run.status = "pending";
      run.seq = ev.seq;
      // An edit names its parent; a plain input follows the leaf before it.
      growTree(model, runId, run, "parent_run_id" in d ? d.parent_run_id : leaf, runId, changes);
    }
  },

  [P.K_RUN_QUEUED]: runQueuedOrStarted,
  [P.K_RUN_STARTED]: runQueuedOrStarted,

  [P.K_ASSISTANT_DELTA](model, ev, d, _runId, changes) {
    const text = str(d.text);
    const seg = segmentFor(model, ev, changes);
    if (changes.length && changes[changes.length - 1].item === seg) {
      seg.text = text; // just created: the add renders the text
    } else {
      seg.text += text;
      changes.push({ op: "append", item: seg, text });
    }
  },

  [P.K_ASSISTANT_MESSAGE](model, ev, d, _runId, changes) {
    const seg = segmentFor(model, ev, changes);
    seg.text = str(d.text);
    seg.final = true;
    if (!(changes.length && changes[changes.length - 1].item === seg)) changes.push({ op: "update", item: seg });
  },

  [P.K_TOOL_CALL](model, ev, d, runId, changes) {
    const id = str(d.tool_call_id);
    const item = { key: `t${ev.seq}`, seq: ev.seq, type: "tool", toolCallId: id, tool: str(d.tool), args: d.args ?? {}, display: displayOf(d), runId };
    const i = addItem(model, item, changes);
    if (id) model.idx.tool[id] = i;
  },

  [P.K_APPROVAL_REQUESTED](model, ev, d, runId, changes) {
    const id = str(d.approval_id);
    if (id && model.idx.approval[id] !== undefined) return;
    const item = {
      key: `p${ev.seq}`,
      seq: ev.seq,
      type: "approval",
      approvalId: id,
      toolCallId: str(d.tool_call_id),
      tool: str(d.tool),
      args: d.args ?? {},
      display: displayOf(d),
      note: str(d.note),
      kind: str(d.kind) || P.GATE_APPROVAL,
      step: str(d.step),
      expiresAt: str(d.expires_at),
      status: "pending",
      decision: null,
      decidedBy: null,
      reason: "",
      runId,
    };
    const i = addItem(model, item, changes);
    if (id) model.idx.approval[id] = i;
    countStep(model, item.step, changes);
  },

  [P.K_APPROVAL_DECIDED](model, _ev, d, _runId, changes) {
    const i = model.idx.approval[str(d.approval_id)];
    if (i === undefined) return;
    const item = model.items[i];
    item.decision = str(d.decision);
    item.status = STATUS_OF[d.decision] || "denied";
    item.decidedBy = str(d.decided_by);
    item.reason = str(d.reason);
    item.editedArgs = d.args && typeof d.args === "object" ? d.args : null;
    item.response = str(d.response);
    item.answer = d.answer && typeof d.answer === "object" ? d.answer : null;
    changes.push({ op: "update", item });
    countStep(model, item.step, changes);
  },

  [P.K_TOOL_RESULT](model, ev, d, runId, changes) {
    const item = {
      key: `r${ev.seq}`,
      seq: ev.seq,
      type: "result",
      toolCallId: str(d.tool_call_id),
      ok: d.ok === true,
      output: str(d.output),
      runId,
    };
    addItem(model, item, changes);
  },

  [P.K_RUN_PAUSED](model, _ev, _d, runId, changes) {
    const run = runOf(model, runId);
    if (run && run.status !== "finished") {
      run.status = "awaiting_approval";
      changes.push({ op: "runs" });
    }
  },

  [P.K_RUN_RESUMED](model, ev, d, runId, changes) {
    // The run goes on in another process from its last checkpoint: of the
    // text being streamed only the first `keep` characters (code points, as
    // the server counts them) stand; the step after them is redone.
    const si = model.idx.seg[runId];
    if (si !== undefined && model.idx.lastOfRun[runId] === si && !model.items[si].final) {
      const seg = model.items[si];
      const keep = Number.isInteger(d.keep) && d.keep > 0 ? d.keep : 0;
      const chars = Array.from(seg.text);
      if (chars.length > keep) {
        seg.text = chars.slice(0, keep).join("");
        changes.push({ op: "update", item: seg });
      }
    }
    const run = runOf(model, runId);
    if (!run || run.resumedNote) return;
    // One quiet note a run, kept out of the run's segments (lastOfRun).
    run.resumedNote = true;
    const item = { key: `s${ev.seq}`, seq: ev.seq, type: "resumed", runId, reason: str(d.reason) };
    model.items.push(item);
    changes.push({ op: "add", item });
  },

  [P.K_RUN_FINISHED](model, ev, d, runId, changes) {
    const run = runOf(model, runId);
    if (!run) return;
    const wasQueued = run.status === "queued" || run.status === "pending";
    run.status = "finished";
    run.stop = str(d.stop_reason);
    changes.push({ op: "runs" });
    const si = model.idx.seg[runId];
    if (si !== undefined && !model.items[si].final) {
      model.items[si].final = true;
      changes.push({ op: "update", item: model.items[si] });
    }
    if (run.stop && run.stop !== P.STOP_END_TURN) {
      const item = {
        key: `f${ev.seq}`,
        seq: ev.seq,
        type: "notice",
        runId,
        stop: run.stop,
        queued: wasQueued,
        message: str(d.message),
      };
      addItem(model, item, changes);
    }
  },

  [P.K_BRANCH_SWITCHED](model, _ev, d, _runId, changes) {
    if (typeof d.leaf_run_id === "string" && model.runs[d.leaf_run_id]) {
      model.leaf = d.leaf_run_id;
      changes.push({ op: "path" });
    }
  },
};

function runQueuedOrStarted(model, ev, d, runId, changes) {
  const run = runOf(model, runId);
  if (!run) return;
  if (d.client_message_id) run.cmid = str(d.client_message_id);
  if (!run.seq) run.seq = ev.seq;
  if (typeof d.regenerates === "string" && model.runs[d.regenerates]) {
    // A regenerated answer: no user.message of its own, it answers the
    // one of the run it regenerates (which is what shows its input).
    const answers = model.runs[d.regenerates].answers || d.regenerates;
    growTree(model, runId, run, d.parent_run_id ?? null, answers, changes);
    const ui = model.idx.user[model.runs[answers]?.cmid];
    if (run.cmid && ui !== undefined && model.idx.user[run.cmid] === undefined) model.idx.user[run.cmid] = ui;
  }
  if (run.status !== "finished") run.status = ev.kind === P.K_RUN_QUEUED ? "queued" : "running";
  changes.push({ op: "runs" });
}

/**
 * Apply one event to the model (mutating it), through its kind's handler.
 *
 * Unknown kinds change nothing (they are carried, never rejected).
 * @param {object} model
 * @param {{seq: number, kind: string, run_id?: string|null, data?: object}} ev
 * @returns {Array<object>} changes: {op: "add"|"update", item}, {op: "append",
 *   item, text}, {op: "runs"} (queue / active run changed), {op: "title"}
 */
export function applyEvent(model, ev) {
  const changes = [];
  const handler = Object.hasOwn(HANDLERS, ev.kind) ? HANDLERS[ev.kind] : null;
  if (handler) {
    const d = ev.data && typeof ev.data === "object" ? ev.data : {};
    handler(model, ev, d, ev.run_id || null, changes);
  }
  return changes;
}

/**
 * Apply a stretch of superseded deltas the server skipped (a `compacted`
 * frame): the run's text segment starts here, as its first delta would have
 * started it, and the `assistant.message` that follows fills it. The model
 * ends exactly as after the deltas themselves.
 * @param {object} model
 * @param {{seq: number, run_id?: string|null}} item see apply.js compactedItem
 * @returns {Array<object>} changes, as applyEvent's
 */
export function applyCompacted(model, item) {
  const changes = [];
  segmentFor(model, { seq: item.seq, run_id: item.run_id || null }, changes);
  return changes;
}

/**
 * @param {object} model
 * @param {string} cmid
 * @returns {boolean} whether a user.message with this client_message_id is in the model
 */
export function hasUserMessage(model, cmid) {
  return model.idx.user[cmid] !== undefined;
}

/**
 * Inputs waiting behind the active run, in order.
 * @param {object} model
 * @returns {Array<{runId: string, cmid: string, text: string, seq: number}>}
 */
export function queuedRuns(model) {
  const out = [];
  for (const [runId, run] of Object.entries(model.runs)) {
    if (run.status !== "queued") continue;
    const ui = model.idx.user[run.cmid];
    out.push({ runId, cmid: run.cmid || "", text: ui !== undefined ? model.items[ui].text : "", seq: run.seq || 0 });
  }
  return out.sort((a, b) => a.seq - b.seq);
}

/**
 * The run that is executing or parked at a gate, if any.
 * @param {object} model
 * @returns {{runId: string, status: string}|null}
 */
export function activeRun(model) {
  let best = null;
  for (const [runId, run] of Object.entries(model.runs)) {
    if (run.status !== "running" && run.status !== "awaiting_approval") continue;
    if (!best || (run.seq || 0) > best.seq) best = { runId, status: run.status, seq: run.seq || 0 };
  }
  return best ? { runId: best.runId, status: best.status } : null;
}
