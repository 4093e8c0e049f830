import assert from "node:assert/strict";
import { test } from "node:test";

import { ago } from "../../static/sessions_app/js/list.js";

test("last activity reads as the server's template writes it", () => {
  const now = Date.parse("2026-12-03T12:00:00Z");
  assert.equal(ago("2026-12-03T11:59:30+00:00", now), "just now");
  assert.equal(ago("2026-12-03T11:55:00+00:00", now), "5\u00a0minutes ago");
  assert.equal(ago("2026-12-03T11:00:00+00:00", now), "1\u00a0hour ago");
  assert.equal(ago("2026-12-01T12:00:00+00:00", now), "2\u00a0days ago");
  assert.equal(ago("not a date", now), "just now");
  assert.equal(ago("2026-12-03T12:05:00+00:00", now), "just now", "a clock a little ahead");
});
