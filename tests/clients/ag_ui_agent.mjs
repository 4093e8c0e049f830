// @ag-ui/client's HttpAgent, unchanged, against this server (what CopilotKit
// drives in a page). Driven by tests/web/test_ag_ui.py:
//
//   node ag_ui_agent.mjs <base url> <api token> <thread id> <scenario> [text]
//
// It prints one JSON line: the agent's messages, its interrupts, each run's
// outcome, and the raw bytes of every response (for ag-ui-validate).
// Scenarios:
//   turn      run <text>
//   approve   run <text> (a gated tool); answer the interrupt approved; run again
//   deny      the same, denied
//   several   run <text> (a step of gates); answer every interrupt in one
//             resume, the first approved and the rest alternating (each
//             denial with a reason)
//   cut       run <text>; abort after the first text content; run again with
//             Last-Event-ID (the last id received) and the same runId
//   join      join the thread late (GET /api/ag-ui/<thread>/stream) through
//             the agent's own connectAgent()

import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const [base, token, threadId, scenario, text] = process.argv.slice(2);

const recorded = [];
let lastId = null;
let abortOnContent = false;
let agent;

// The agent's fetch, teed: every response's bytes are kept, and the last SSE
// id seen (what an EventSource would send as Last-Event-ID).
async function teeFetch(url, init) {
  const response = await fetch(url, init);
  if (!response.body) return response;
  const [mine, theirs] = response.body.tee();
  const record = { status: response.status, body: "" };
  recorded.push(record);
  (async () => {
    const reader = mine.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const chunk = decoder.decode(value, { stream: true });
        record.body += chunk;
        pending += chunk;
        const blocks = pending.split("\n\n");
        pending = blocks.pop();
        for (const block of blocks) {
          for (const line of block.split("\n")) {
            if (line.startsWith("id: ")) lastId = line.slice(4);
          }
          if (abortOnContent && block.includes('"TEXT_MESSAGE_CONTENT"')) {
            abortOnContent = false;
            agent.abortRun();
          }
        }
      }
    } catch {
      // aborted
    }
  })();
  return new Response(theirs, { status: response.status, headers: response.headers });
}

agent = new HttpAgent({
  url: `${base}/api/ag-ui/`,
  headers: { Authorization: `Token ${token}` },
  threadId,
  fetch: teeFetch,
});

const out = { scenario, runs: [] };

async function run(params = {}) {
  const finished = {};
  try {
    const result = await agent.runAgent(params, {
      onRunFinishedEvent: ({ outcome, interrupts }) => {
        finished.outcome = outcome;
        finished.interrupts = interrupts;
      },
      onRunErrorEvent: ({ event }) => {
        finished.error = event.message;
      },
    });
    finished.newMessages = result.newMessages?.length ?? 0;
  } catch (error) {
    finished.thrown = String(error?.message ?? error);
  }
  out.runs.push(finished);
  return finished;
}

if (scenario !== "join") agent.addMessage({ id: `m-${Date.now()}`, role: "user", content: text });
if (scenario === "join") {
  agent.connect = () =>
    transformHttpEventStream(
      runHttpRequest(() =>
        teeFetch(`${base}/api/ag-ui/${encodeURIComponent(threadId)}/stream`, {
          method: "GET",
          headers: { Authorization: `Token ${token}`, Accept: "text/event-stream" },
        }),
      ),
    );
  const finished = {};
  try {
    await agent.connectAgent(
      { runId: "j1" },
      {
        onRunFinishedEvent: ({ outcome }) => {
          finished.outcome = outcome;
        },
      },
    );
  } catch (error) {
    finished.thrown = String(error?.message ?? error);
  }
  out.runs.push(finished);
} else if (scenario === "turn") {
  await run({ runId: "r1" });
} else if (scenario === "approve" || scenario === "deny") {
  const first = await run({ runId: "r1" });
  const interrupt = first.interrupts?.[0];
  out.interrupt = interrupt ?? null;
  if (interrupt) {
    await run({
      runId: "r2",
      resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: scenario === "approve" } }],
    });
  }
} else if (scenario === "several") {
  const first = await run({ runId: "r1" });
  out.interrupts = first.interrupts ?? [];
  await run({
    runId: "r2",
    resume: out.interrupts.map((interrupt, i) => ({
      interruptId: interrupt.id,
      status: "resolved",
      payload: i % 2 === 0 ? { approved: true } : { approved: false, reason: `not number ${i + 1}` },
    })),
  });
} else if (scenario === "cut") {
  abortOnContent = true;
  await run({ runId: "r1" });
  out.cutAt = lastId;
  await new Promise((r) => setTimeout(r, 50));
  agent.headers = { ...agent.headers, "Last-Event-ID": lastId };
  await run({ runId: "r1" });
} else {
  throw new Error(`no scenario ${scenario}`);
}
await new Promise((r) => setTimeout(r, 50));
out.messages = agent.messages;
out.threadId = agent.threadId;
out.recorded = recorded;
console.log(JSON.stringify(out));
