// Not a test file: a helper the server tests run (tests/log/test_compaction.py).
// Reads {"cases": [[frame, ...], ...]} on stdin, applies each case's frames
// (event and compacted frames, as a socket delivers them) through the
// client's own ApplyLoop and transcript reducer, and prints
// {"results": [{"cursor", "model"}, ...]}.

import { ApplyLoop, compactedItem } from "../../static/sessions_app/js/model/apply.js";
import { applyCompacted, applyEvent, emptyModel } from "../../static/sessions_app/js/model/transcript.js";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { cases } = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const results = cases.map((frames) => {
  const model = emptyModel();
  const loop = new ApplyLoop({
    apply: (item) => (item.type === "compacted" ? applyCompacted(model, item) : applyEvent(model, item)),
    send: () => {
      throw new Error("a gap: the frames were not contiguous");
    },
    onError: (err) => {
      throw err;
    },
  });
  for (const frame of frames) {
    const item = frame.type === "compacted" ? compactedItem(frame) : frame;
    if (item === null) throw new Error(`malformed frame ${JSON.stringify(frame)}`);
    if (loop.receive(item) !== "applied") throw new Error(`not applied: ${JSON.stringify(frame)}`);
  }
  return { cursor: loop.cursor, model };
});
process.stdout.write(JSON.stringify({ results }));
