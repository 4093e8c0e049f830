// Where the client finds the app's routes (static/sessions_app/js/client/urls.js): from the page,
// under whatever prefix the project mounted the app.
import assert from "node:assert/strict";
import { test } from "node:test";

import { DEFAULT_URLS, pageUrls, urlFor } from "../../static/sessions_app/js/client/urls.js";

const docWith = (urls) => ({ body: { dataset: urls === undefined ? {} : { urls } } });

test("the page's routes win; an id is put in encoded", () => {
  const urls = pageUrls(docWith(JSON.stringify({ session: "/agents/s/SESSION_ID/", ws_sessions: "/agents/ws/sessions/" })));
  assert.equal(urlFor(urls, "session", "s_a/b"), "/agents/s/s_a%2Fb/");
  assert.equal(urlFor(urls, "ws_sessions"), "/agents/ws/sessions/");
  assert.equal(urlFor(urls, "api_session", "s_1"), "/api/sessions/s_1/");
});

test("no routes, bad JSON or a route that is not a path: the default mount", () => {
  for (const given of [undefined, "{", JSON.stringify({ list: "javascript:alert(1)", ws_list: 5 })]) {
    assert.deepEqual(pageUrls(docWith(given)), { ...DEFAULT_URLS });
  }
});
