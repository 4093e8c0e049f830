import assert from "node:assert/strict";
import { test } from "node:test";

import { csrfToken } from "../../static/sessions_app/js/view/rename.js";

test("the CSRF token is read from Django's cookie", () => {
  assert.equal(csrfToken({ cookie: "a=1; csrftoken=abc%3D; b=2" }), "abc=");
  assert.equal(csrfToken({ cookie: "csrftoken=xyz" }), "xyz");
  assert.equal(csrfToken({ cookie: "notcsrftoken=1" }), "");
  assert.equal(csrfToken({ cookie: "" }), "");
});
