"""The chaos suite's hostile phase (``--only hostile``; see ``chaos.py``): what
the second security review tried, at random and at scale.

- **Amplification.** Sockets that never read flood ~60 KB frames of an
  unknown type (raw DEL characters: 5x as an echoed repr) at the rate
  limit's pace. Invariant: daphne's memory stays bounded (every reply is
  flow-controlled and quotes 40 characters).
- **Rights.** Users with live session and list sockets have their password
  changed (through the site's view, so the change is published where the
  sockets are) or are deactivated (straight in the database, where no
  message may reach a socket), at random. Invariants: after a password
  change every socket of the user closes 4403; after a deactivation their
  next ``/write`` is refused (``rights_revoked``) and its tool never runs.
- **Markdown.** A Chromium tab echoes a random hostile corpus (deep quotes
  and lists, emphasis runs, huge blocks) between ordinary messages.
  Invariant: the page shows every ordinary message rendered, every hostile
  one as text, live and after a reload.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

from chaos_phases import Report, _db, _rss_kib
from django.contrib.auth import get_user_model

from sessions_app.models import Event
from sessions_app.runtime.tools import workspace_for
from tests.access.test_rights import _change_password
from tests.harness import (
    WsClient,
    session_cookie,
)
from tests.raw_http import client_frame, raw_socket_that_never_reads


async def amplification(cluster, cookie: str, args, report: Report) -> None:
    daphne = cluster.daphnes[0]
    before = _rss_kib(daphne.proc.pid)
    junk = client_frame(
        json.dumps({"type": "\x7f" * 60_000, "request_id": "r" * 128}, ensure_ascii=False)
    )
    sent = 0

    async def flood(path: str) -> None:
        nonlocal sent
        sock = await asyncio.to_thread(raw_socket_that_never_reads, daphne.port, cookie, path)
        if path == "/ws/sessions/":
            sock.sendall(client_frame(json.dumps({"type": "start", "protocol": 1})))
        end = time.monotonic() + args.hostile_seconds
        try:
            while time.monotonic() < end:
                await asyncio.to_thread(sock.sendall, junk)
                sent += 1
                await asyncio.sleep(1 / 28)  # sleep-ok: the attack's pace, under the rate
        except OSError:
            pass  # closed by the server
        finally:
            sock.close()

    paths = ["/ws/sessions/", "/ws/list/"] * (args.hostile_sockets // 2)
    await asyncio.gather(*(flood(p) for p in paths))
    growth = (_rss_kib(daphne.proc.pid) - before) / 1024
    report.figure(f"hostile: {sent:,} amplifying frames from {len(paths)} non-reading sockets")
    report.check(
        growth < 100, f"hostile: daphne RSS grew {growth:.0f} MiB under amplification (bound 100)"
    )


async def rights(cluster, args, report: Report) -> None:
    rng = random.Random(args.seed + 21)
    daphne = cluster.daphnes[0]
    lists = daphne.ws.replace("/ws/sessions/", "/ws/list/")
    closed_ok = refused_ok = 0
    for i in range(args.hostile_users):
        user = await _db(_user, f"hostile-{args.seed}-{i}")
        cookie = await _db(session_cookie, user)
        tab = await WsClient.connect(daphne.ws, cookie)
        sid = (await tab.start())["session_id"]
        lister = await WsClient.connect(lists, cookie)
        await lister.wait(lambda f: f.get("type") == "sessions")
        if rng.random() < 0.5:
            status, _ = await asyncio.to_thread(
                _change_password, daphne, cookie, "hostile-pass-1", f"changed-{i}-pass-2"
            )
            codes = [await ws.wait_closed(timeout=30) for ws in (tab, lister)]
            ok = status == 302 and codes == [4403, 4403]
            closed_ok += ok
            report.check(ok, f"hostile: password change {i}: status {status}, closes {codes}")
            continue
        await _db(lambda pk=user.pk: get_user_model().objects.filter(pk=pk).update(is_active=False))
        try:
            reply = await tab.request(
                {"type": "send", "client_message_id": "late", "text": "/write x.txt y"}
            )
            refused = reply.get("code") == "rights_revoked"
        except Exception:
            refused = tab.closed_code == 4403
        ran = (workspace_for(sid) / "x.txt").exists() or await _db(
            Event.objects.filter(session_id=sid, kind="tool.call").exists
        )
        ok = refused and not ran
        refused_ok += ok
        report.check(ok, f"hostile: deactivated user {i}: refused {refused}, tool ran {ran}")
        await tab.close()
        await lister.close()
    report.figure(
        f"hostile: {closed_ok} password changes closed every socket 4403; "
        f"{refused_ok} deactivated users' commands refused"
    )


def _user(name: str):
    user, _ = get_user_model().objects.get_or_create(username=name)
    user.set_password("hostile-pass-1")
    user.is_active = True
    user.save()
    return user


def hostile_corpus(rng: random.Random, n: int) -> list[str]:
    """``n`` texts of the kinds that once blanked a session, sized at random
    (each under the 32,000 characters a message may have)."""
    makers = [
        lambda: ">" * rng.randint(100, 20_000),
        lambda: "- " * rng.randint(100, 8_000) + "x",
        lambda: "\n".join("  " * i + "- i" for i in range(rng.randint(20, 150))),
        lambda: "*" * rng.randint(100, 20_000),
        lambda: ("*a _b " * rng.randint(100, 5_000)).strip(),
        lambda: "[" * rng.randint(100, 10_000) + "x" + "]" * rng.randint(0, 100),
        lambda: "`" * rng.randint(100, 10_000),
        lambda: "1. " * rng.randint(100, 5_000) + "n",
    ]
    return [rng.choice(makers)() for _ in range(n)]


def markdown(cluster, args, report: Report) -> None:
    from playwright.sync_api import expect, sync_playwright

    from tests.browser.helpers import assistant_texts, expect_live, send, settle

    rng = random.Random(args.seed + 31)
    user = _user(f"hostile-md-{args.seed}")
    name, value = session_cookie(user).split("=", 1)
    daphne = cluster.daphnes[0]
    texts: list[str] = []
    for i, hostile in enumerate(hostile_corpus(rng, args.hostile_markdown)):
        texts += [f"ordinary **{i}**", hostile]
    texts.append("ordinary **end**")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium")
        context = browser.new_context()
        context.add_cookies([{"name": name, "value": value, "url": daphne.http}])
        page = context.new_page()
        page.goto(daphne.http + "/")
        page.get_by_test_id("new-session").click()
        expect_live(page)
        session_id = page.get_by_test_id("transcript").get_attribute("data-session-id")
        for text in texts:
            send(page, "/echo " + text)
        shown_ok = True
        for attempt in ("live", "after a reload"):
            settle(page, session_id, runs=len(texts))
            ok = assistant_texts(page) == texts
            answers = page.locator("[data-testid=assistant-message]")
            for i in range(0, len(texts), 2):
                expect(answers.nth(i).locator("strong")).to_have_count(1)
            shown_ok &= ok
            report.check(ok, f"hostile: Chromium shows every message {attempt}")
            page.reload()
            expect_live(page)
        browser.close()
    report.figure(
        f"hostile: {args.hostile_markdown} hostile Markdown messages rendered "
        f"{'without' if shown_ok else 'WITH'} a hidden message"
    )
