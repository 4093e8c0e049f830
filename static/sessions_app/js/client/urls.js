/**
 * Where the app's routes are, as the page says (`data-urls` on `<body>`,
 * written by the `{% client_urls %}` tag from Django's own routing): the app
 * may be mounted under any prefix, so the client never writes a path itself.
 * A page without them (an older template) gets the default mount.
 *
 * @module urls
 */

/** The default mount's routes ("SESSION_ID" stands for a session's id). */
export const DEFAULT_URLS = Object.freeze({
  list: "/",
  session: "/s/SESSION_ID/",
  api_session: "/api/sessions/SESSION_ID/",
  ws_sessions: "/ws/sessions/",
  ws_list: "/ws/list/",
});

/**
 * The page's routes.
 * @param {Document} doc
 * @returns {Record<string, string>}
 */
export function pageUrls(doc) {
  let given = {};
  try {
    given = JSON.parse(doc.body?.dataset.urls || "{}");
  } catch {
    given = {};
  }
  const out = { ...DEFAULT_URLS };
  for (const [name, value] of Object.entries(given)) if (typeof value === "string" && value.startsWith("/")) out[name] = value;
  return out;
}

/**
 * One route, with a session's id put in (encoded).
 * @param {Record<string, string>} urls from pageUrls
 * @param {string} name
 * @param {string} [sessionId]
 * @returns {string}
 */
export function urlFor(urls, name, sessionId = "") {
  return (urls[name] ?? DEFAULT_URLS[name]).replace("SESSION_ID", encodeURIComponent(sessionId));
}
