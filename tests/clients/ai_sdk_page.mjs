// An example chat page on the `ai` package (docs/integrations.md), bundled
// with esbuild and tested in Chromium (tests/browser/test_ai_sdk_page.py).
// What useChat does, without React: the ai package's own AbstractChat and
// DefaultChatTransport with only `api` set, the session cookie and its CSRF
// header, the page's messages loaded from the log, then resumeStream().
//
//   <div id="app" data-chat-id="…"></div> <script src="ai_sdk_page.js"></script>

import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";

const root = document.getElementById("app");
const chatId = root.dataset.chatId;

function csrf() {
  const found = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
  return found ? decodeURIComponent(found.slice("csrftoken=".length)) : "";
}

class DomState {
  constructor(messages, onChange) {
    this._messages = messages;
    this._status = "ready";
    this.error = undefined;
    this.onChange = onChange;
  }
  get status() {
    return this._status;
  }
  set status(value) {
    this._status = value;
    this.onChange();
  }
  get messages() {
    return this._messages;
  }
  set messages(value) {
    this._messages = value;
    this.onChange();
  }
  pushMessage = (message) => {
    this.messages = this._messages.concat(message);
  };
  popMessage = () => {
    this.messages = this._messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this._messages.slice(0, index), this.snapshot(message), ...this._messages.slice(index + 1)];
  };
  snapshot = (value) => structuredClone(value);
}

class PageChat extends AbstractChat {
  constructor({ messages, ...init }) {
    const state = new DomState(messages, () => render());
    super({ ...init, state });
    this.domState = state;
  }
}

// Text is set with textContent only: a model's output never becomes markup.
function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

let chat;

function render() {
  if (!chat) return;
  root.dataset.status = chat.status;
  const list = el("ol", { "data-testid": "messages" });
  for (const message of chat.messages) {
    const item = el("li", { "data-testid": `${message.role}-message`, "data-id": message.id });
    for (const part of message.parts) {
      if (part.type === "text") item.append(el("p", { "data-testid": "text" }, part.text));
      if (part.type.startsWith("tool-")) {
        const tool = el("div", { "data-testid": "tool", "data-state": part.state, "data-tool": part.type.slice(5) });
        tool.append(el("code", {}, JSON.stringify(part.input)));
        if (part.state === "approval-requested") {
          for (const [label, approved] of [
            ["Approve", true],
            ["Deny", false],
          ]) {
            const button = el("button", { "data-testid": approved ? "approve" : "deny" }, label);
            button.onclick = () => chat.addToolApprovalResponse({ id: part.approval.id, approved });
            tool.append(button);
          }
        }
        if (part.state === "output-available") tool.append(el("output", { "data-testid": "output" }, String(part.output)));
        item.append(tool);
      }
    }
    list.append(item);
  }
  root.querySelector("[data-testid=messages]")?.remove();
  root.prepend(list);
}

async function main() {
  const loaded = await fetch(`/api/ai-sdk/chat/${encodeURIComponent(chatId)}/messages`);
  const messages = loaded.ok ? await loaded.json() : [];
  // The first run these messages left out: the reconnect streams it, even
  // if it finished between the two requests.
  const leftOut = loaded.headers.get("X-Agent-Resume-Run");
  const transport = new DefaultChatTransport({
    api: "/api/ai-sdk/chat",
    headers: () => ({ "X-CSRFToken": csrf() }),
    prepareReconnectToStreamRequest: ({ id }) => ({
      api: `/api/ai-sdk/chat/${encodeURIComponent(id)}/stream${leftOut ? `?run=${encodeURIComponent(leftOut)}` : ""}`,
    }),
  });
  chat = new PageChat({
    id: chatId,
    messages,
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onError: (error) => {
      root.dataset.error = String(error?.message ?? error);
    },
  });
  const form = el("form", { "data-testid": "composer" });
  const input = el("input", { "data-testid": "input", name: "text", autocomplete: "off" });
  form.append(input, el("button", { type: "submit" }, "Send"));
  form.onsubmit = (event) => {
    event.preventDefault();
    if (input.value.trim()) chat.sendMessage({ text: input.value });
    input.value = "";
  };
  root.append(form);
  render();
  root.dataset.loaded = "true";
  await chat.resumeStream();
  render();
}

main();
