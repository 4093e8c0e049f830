// The `ai` package's own chat client (AbstractChat, DefaultChatTransport, its
// UI message stream reader), unchanged, against this server: what useChat
// does in a page, without React. Driven by tests/web/test_ai_sdk.py:
//
//   node ai_sdk_chat.mjs <base url> <api token> <chat id> <scenario> [text]
//
// It prints one JSON line: the chat's messages (and what each step saw).
// Scenarios:
//   turn      send <text>, wait for the answer
//   approve   send <text> (a gated tool), approve the gate, wait for the end
//   deny      the same, denying it
//   gate      send <text>, stop at the gate (the approval card): no answer
//   cut       send <text>, abort after the first text delta (a tab closed)
//   resume    a fresh page: load …/messages, then resumeStream() (with <text>,
//             a file it creates once the resumed answer shows text: the
//             release of the test's held run, tests/support/rig.py)

import { writeFileSync } from "node:fs";
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";

const [base, token, chatId, scenario, text] = process.argv.slice(2);

class NodeChatState {
  constructor(messages = []) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (message) => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message), ...this.messages.slice(index + 1)];
  };
  snapshot = (value) => structuredClone(value);
}

class NodeChat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new NodeChatState(messages) });
  }
}

const headers = { Authorization: `Token ${token}` };
const transport = new DefaultChatTransport({ api: `${base}/api/ai-sdk/chat`, headers });
const errors = [];

function chat(messages = [], extra = {}) {
  return new NodeChat({
    id: chatId,
    messages,
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onError: (error) => errors.push(String(error?.message ?? error)),
    ...extra,
  });
}

function approvalOf(c) {
  for (const message of c.messages) {
    for (const part of message.parts) {
      if (part.state === "approval-requested") return part.approval.id;
    }
  }
  return null;
}

// An assistant message with some text.
function shows(message) {
  return message?.role === "assistant" && message.parts.some((p) => p.type === "text" && p.text);
}

async function idle(c) {
  // The automatic send after an approval starts on its own: wait for it to end.
  for (let i = 0; i < 600; i++) {
    await new Promise((r) => setTimeout(r, 50));
    if (c.status === "ready" || c.status === "error") {
      await new Promise((r) => setTimeout(r, 100));
      if (c.status === "ready" || c.status === "error") return;
    }
  }
  throw new Error(`the chat never settled: ${c.status}`);
}

const out = { scenario, steps: [] };
let c;
if (scenario === "turn" || scenario === "gate") {
  c = chat();
  await c.sendMessage({ text });
} else if (scenario === "approve" || scenario === "deny") {
  c = chat();
  await c.sendMessage({ text });
  const id = approvalOf(c);
  out.steps.push({ approval: id, status: c.status });
  await c.addToolApprovalResponse({ id, approved: scenario === "approve" });
  await idle(c);
} else if (scenario === "several") {
  // Every approval of one step answered (the second denied with a reason);
  // the chat sends once, when the last is answered.
  c = chat();
  await c.sendMessage({ text });
  const ids = c.messages.flatMap((m) => m.parts.filter((p) => p.state === "approval-requested").map((p) => p.approval.id));
  out.steps.push({ approvals: ids, status: c.status });
  for (const [i, id] of ids.entries()) {
    await c.addToolApprovalResponse(i === 1 ? { id, approved: false, reason: "not this one" } : { id, approved: true });
  }
  await idle(c);
} else if (scenario === "cut") {
  let deltas = 0;
  c = chat([], {
    onData: () => {},
  });
  const sending = c.sendMessage({ text });
  for (let i = 0; i < 400 && deltas === 0; i++) {
    await new Promise((r) => setTimeout(r, 25));
    const last = c.messages.at(-1);
    if (last?.role === "assistant" && last.parts.some((p) => p.type === "text" && p.text)) {
      deltas = 1;
    }
  }
  await c.stop();
  await sending;
  out.steps.push({ cut_after: c.messages.at(-1)?.parts ?? [] });
} else if (scenario === "resume") {
  const loaded = await fetch(`${base}/api/ai-sdk/chat/${chatId}/messages`, { headers });
  const messages = await loaded.json();
  out.steps.push({ loaded: messages.length });
  c = chat(messages);
  const resuming = c.resumeStream();
  if (text) {
    for (let i = 0; i < 400 && !shows(c.messages.at(-1)); i++) {
      await new Promise((r) => setTimeout(r, 25));
    }
    writeFileSync(text, "");
  }
  await resuming;
  await idle(c);
} else {
  throw new Error(`no scenario ${scenario}`);
}
out.status = c.status;
out.errors = errors;
out.messages = c.messages;
console.log(JSON.stringify(out));
