// An example chat page on @ag-ui/client (docs/integrations.md), bundled with
// esbuild and tested in Chromium (tests/browser/test_ag_ui_page.py): the
// package's own HttpAgent, unchanged, with the session cookie and its CSRF
// header; the one thing added is how a page that loads joins its thread
// (this server's extension: GET /api/ag-ui/<threadId>/stream, through the
// agent's own connect(), so MESSAGES_SNAPSHOT and the run still going are
// applied by the package as any run's events).
//
//   <div id="app" data-thread-id="…"></div> <script src="ag_ui_page.js"></script>

import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const root = document.getElementById("app");
const threadId = root.dataset.threadId;

function csrf() {
  const found = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
  return found ? decodeURIComponent(found.slice("csrftoken=".length)) : "";
}

class PageAgent extends HttpAgent {
  // A late join: the thread as it stands, then the run still going.
  connect() {
    const url = `/api/ag-ui/${encodeURIComponent(this.threadId)}/stream`;
    const init = { method: "GET", headers: { Accept: "text/event-stream" }, signal: this.abortController.signal };
    return transformHttpEventStream(runHttpRequest(() => this.fetch(url, init)));
  }
}

const agent = new PageAgent({ url: "/api/ag-ui/", threadId, headers: { "X-CSRFToken": csrf() } });

// Text is set with textContent only: a model's output never becomes markup.
function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

let busy = false;

function render() {
  root.dataset.status = busy ? "running" : "ready";
  const list = el("ol", { "data-testid": "messages" });
  const results = new Map(agent.messages.filter((m) => m.role === "tool").map((m) => [m.toolCallId, m.content]));
  for (const message of agent.messages) {
    if (message.role !== "user" && message.role !== "assistant") continue;
    const item = el("li", { "data-testid": `${message.role}-message`, "data-id": message.id });
    if (message.content) item.append(el("p", { "data-testid": "text" }, String(message.content)));
    for (const call of message.toolCalls ?? []) {
      const tool = el("div", { "data-testid": "tool", "data-tool": call.function.name, "data-id": call.id });
      tool.append(el("code", {}, call.function.arguments));
      if (results.has(call.id)) tool.append(el("output", { "data-testid": "output" }, String(results.get(call.id))));
      item.append(tool);
    }
    list.append(item);
  }
  for (const interrupt of busy ? [] : agent.pendingInterrupts) {
    const card = el("div", { "data-testid": "interrupt", "data-id": interrupt.id }, interrupt.message ?? "Approve?");
    for (const [label, approved] of [
      ["Approve", true],
      ["Deny", false],
    ]) {
      const button = el("button", { "data-testid": approved ? "approve" : "deny" }, label);
      button.onclick = () => go({ resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved } }] });
      card.append(button);
    }
    list.append(card);
  }
  root.querySelector("[data-testid=messages]")?.remove();
  root.prepend(list);
}

async function go(params, join = false) {
  busy = true;
  render();
  try {
    const run = { runId: crypto.randomUUID(), ...params };
    await (join ? agent.connectAgent(run) : agent.runAgent(run));
  } catch (error) {
    root.dataset.error = String(error?.message ?? error);
  } finally {
    busy = false;
    render();
  }
}

agent.subscribe({ onMessagesChanged: () => render() });

const form = el("form", { "data-testid": "composer" });
const input = el("input", { "data-testid": "input", name: "text", autocomplete: "off" });
form.append(input, el("button", { type: "submit" }, "Send"));
form.onsubmit = (event) => {
  event.preventDefault();
  const text = input.value.trim();
  input.value = "";
  if (!text || busy) return;
  agent.addMessage({ id: crypto.randomUUID(), role: "user", content: text });
  go({});
};
root.append(form);
render();
root.dataset.loaded = "true";
go({}, true);
