"""A raw protocol tab for the chaos suite: follows one session through cuts.

``ChaosTab`` behaves like the browser client, minus the DOM: a committed
cursor that moves with each event applied, a send ledger keyed by
``client_message_id`` re-sent after every resume until acknowledged, and
decisions re-sent until the server answers them. Between reconnects it cuts
its own socket at the moments that matter (a random instant, mid-replay,
just after a frame, just after a ``send`` or a ``decide`` went out) by
aborting the transport, as a dropped network does.

It checks the protocol's promises as it goes, never trusting the server to
report them: each event must be ``cursor + 1`` (a lower seq is a duplicate,
a higher one a gap), and every close must be one its client retries after.

Its script holds messages and conversation control: ``@regenerate`` (the
answer of its last run), ``@edit`` (a new version of one of its messages)
and ``@switch`` (show the branch through one of its runs). A regenerate or
an edit is an input of the ledger like a message; a switch is sent once and
may be lost with a cut (it is idempotent, and nothing waits on it).
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
from typing import Any

import websockets

# Closes the browser client never comes back from (static/sessions_app/js/client/socket.js).
FATAL_CLOSES = {4400, 4401}
CUT_MODES = ("random", "mid_replay", "after_frame", "mid_send", "after_decide")


class ChaosTab:
    """One tab of one session, cutting its socket ``cuts`` times."""

    def __init__(
        self,
        name: str,
        urls,
        cookie: str,
        session_id: str,
        epoch: str,
        script: list[str],
        rng: random.Random,
        cuts: int,
    ):
        self.name, self.urls, self.cookie = name, urls, cookie
        self.session_id, self.epoch = session_id, epoch
        self.script, self.rng, self.cuts_left = list(script), rng, cuts
        self.cursor = 0
        self.log: dict[int, tuple[str, Any]] = {}
        # client_message_id -> the send frame's fields (re-sent until acknowledged)
        self.ledger: dict[str, dict[str, Any]] = {}
        self.run_order: list[str] = []
        self.switches = 0
        self.acked: set[str] = set()
        self.sent_index = 0
        self.pending_decisions: dict[str, str] = {}
        self.my_runs: set[str] = set()
        self.finished_runs: set[str] = set()
        self.violations: list[str] = []
        self.closes: collections.Counter = collections.Counter()
        self.cuts = collections.Counter()
        self.connections = 0
        self.connected = False
        self.internal_errors = 0
        self.next_send_at = 0.0
        self.retry_at: float | None = None

    def describe(self) -> str:
        """Where this tab stands (printed for a tab that never settles)."""
        return (
            f"{self.name}: cursor {self.cursor}, connected {self.connected}, cuts left "
            f"{self.cuts_left}, unacked {sorted(self.ledger)}, undecided "
            f"{sorted(self.pending_decisions)}, runs not seen finished "
            f"{sorted(self.my_runs - self.finished_runs)}"
        )

    # --- the loop ------------------------------------------------------------

    @property
    def settled(self) -> bool:
        """Everything it meant to send is acknowledged, every decision answered and
        each of its runs seen finished."""
        return (
            self.sent_index == len(self.script)
            and not self.ledger
            and not self.pending_decisions
            and self.my_runs <= self.finished_runs
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, follow, cut, reconnect with backoff, until ``stop`` and settled."""
        failures = 0
        while not (stop.is_set() and self.settled and self.cuts_left <= 0):
            try:
                await self._connection()
                failures = 0
                # Offline for a while after a cut: the log grows meanwhile, so
                # the next resume has a real replay to cut in the middle of.
                await asyncio.sleep(self.rng.uniform(0, 1.0))
            except (OSError, websockets.WebSocketException, TimeoutError):
                failures += 1
            # The client's backoff: jittered, growing with consecutive failures.
            await asyncio.sleep(self.rng.uniform(0, min(2.0, 0.05 * 2**failures)))

    async def catch_up(self, head: int, timeout: float = 60) -> None:
        """A last clean connection that resumes and reads up to ``head``."""
        self.cuts_left = 0
        await asyncio.wait_for(self._connection(until=head), timeout)

    async def _connection(self, until: int | None = None) -> None:
        url = self.rng.choice(self.urls() if callable(self.urls) else self.urls)
        origin = "http" + url.removeprefix("ws").split("/ws/", 1)[0]
        ws = await websockets.connect(
            url,
            origin=origin,
            additional_headers={"Cookie": self.cookie},
            max_size=2**24,
            ping_interval=None,
            open_timeout=10,
        )
        self.connections += 1
        self.connected = True
        mode = self.rng.choice(CUT_MODES) if self.cuts_left > 0 and until is None else None
        loop = asyncio.get_running_loop()
        cut_at = None
        if mode == "random":
            cut_at = loop.time() + self.rng.uniform(0.05, 1.5)
        elif mode is not None:
            # Where the boundary never comes (nothing to replay, no gate), cut anyway.
            cut_at = loop.time() + 3.0
        after_frames = self.rng.randint(1, 30)
        resumed_head = None
        try:
            await ws.send(
                json.dumps(
                    {
                        "type": "resume",
                        "protocol": 1,
                        "tab_id": self.name,
                        "session_id": self.session_id,
                        "after": self.cursor,
                        "epoch": self.epoch,
                    }
                )
            )
            while True:
                if until is not None and resumed_head is not None and self.cursor >= until:
                    await ws.close()
                    return
                timeout = 0.2
                if cut_at is not None:
                    timeout = max(0.0, min(timeout, cut_at - loop.time()))
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout)
                except TimeoutError:
                    raw = None
                if raw is not None:
                    frame = json.loads(raw)
                    kind = frame.get("type")
                    if kind == "resume_ok":
                        resumed_head = frame["head"]
                        if frame["head"] < self.cursor:
                            self.violations.append(
                                f"{self.name}: head {frame['head']} < cursor {self.cursor}"
                            )
                        await self._resend(ws)
                    elif kind == "event":
                        self._apply(frame)
                        if frame["kind"] == "approval.requested":
                            await self._decide(ws, frame["data"]["approval_id"])
                            if mode == "after_decide":
                                return self._cut(ws, mode)
                        after_frames -= 1
                        if mode == "after_frame" and after_frames <= 0:
                            return self._cut(ws, mode)
                        if mode == "mid_replay" and resumed_head and self.cursor < resumed_head:
                            return self._cut(ws, mode)
                    elif kind == "send_ok":
                        cmid = frame["client_message_id"]
                        self.ledger.pop(cmid, None)
                        self.acked.add(cmid)
                        if frame["run_id"] not in self.my_runs:
                            self.run_order.append(frame["run_id"])
                        self.my_runs.add(frame["run_id"])
                    elif kind == "decide_ok":
                        self.pending_decisions.pop(frame["approval_id"], None)
                    elif kind == "error":
                        self._error(frame)
                    elif kind == "resume_rejected":
                        self.violations.append(f"{self.name}: resume refused: {frame}")
                        return
                if cut_at is not None and loop.time() >= cut_at:
                    # A boundary that did not come within 3 s counts as a random cut.
                    return self._cut(ws, "random")
                if mode is None and until is None and self.settled:
                    await ws.close()
                    return
                if self.retry_at is not None and loop.time() >= self.retry_at:
                    # As the browser client: what failed with internal_error goes again.
                    self.retry_at = None
                    await self._resend(ws)
                ready = resumed_head is not None and until is None
                if ready and await self._maybe_send(ws) and mode == "mid_send":
                    return self._cut(ws, mode)
        except websockets.ConnectionClosed:
            self.connected = False
            code = ws.close_code if ws.close_code is not None else 1006
            self.closes[code] += 1
            if code in FATAL_CLOSES:
                self.violations.append(f"{self.name}: closed {code}, final for its client")
            raise
        finally:
            self.connected = False

    def _cut(self, ws, mode: str) -> None:
        """Drop the connection as a network would: no close frame."""
        self.connected = False
        ws.transport.abort()
        self.cuts[mode] += 1
        self.cuts_left -= 1

    # --- what a client does ------------------------------------------------------

    def _apply(self, frame: dict[str, Any]) -> None:
        seq = frame["seq"]
        if seq <= self.cursor:
            self.violations.append(f"{self.name}: duplicate seq {seq} at cursor {self.cursor}")
            return
        if seq != self.cursor + 1:
            self.violations.append(f"{self.name}: gap: seq {seq} after cursor {self.cursor}")
        self.log[seq] = (frame["kind"], frame["data"])
        self.cursor = seq
        if frame["kind"] == "run.finished":
            self.finished_runs.add(frame["run_id"])

    async def _resend(self, ws) -> None:
        for cmid, fields in list(self.ledger.items()):
            await self._send_message(ws, cmid, fields)
        for approval_id, decision in list(self.pending_decisions.items()):
            await self._send_decide(ws, approval_id, decision)

    async def _maybe_send(self, ws) -> bool:
        """Send the script's next message when the last is acknowledged and its time came."""
        now = asyncio.get_running_loop().time()
        if self.ledger or self.sent_index >= len(self.script) or now < self.next_send_at:
            return False
        cmid = f"{self.name}-m{self.sent_index}"
        step = self.script[self.sent_index]
        self.sent_index += 1
        # Spread over the cuts, so faults find runs streaming and gates waiting.
        self.next_send_at = now + self.rng.uniform(0.5, 4.0)
        if step.startswith("@") and not self.run_order:
            step = "hello"  # nothing of its own to branch from yet
        if step == "@switch":
            self.switches += 1
            target = self.rng.choice(self.run_order)
            switch = {"type": "switch", "request_id": f"w-{cmid}", "run_id": target}
            await ws.send(json.dumps(switch))
            return True
        if step == "@regenerate":
            fields = {"regenerate": self.run_order[-1]}
        elif step == "@edit":
            fields = {"text": f"edited {cmid}", "edit_of": self.rng.choice(self.run_order)}
        else:
            fields = {"text": step.format(cmid=cmid)}
        self.ledger[cmid] = fields
        await self._send_message(ws, cmid, fields)
        return True

    async def _send_message(self, ws, cmid: str, fields: dict[str, Any]) -> None:
        frame = {"type": "send", "request_id": f"s-{cmid}", "client_message_id": cmid, **fields}
        await ws.send(json.dumps(frame))

    async def _decide(self, ws, approval_id: str) -> None:
        # Deterministic per gate, whichever tab decides first.
        decision = "deny" if int(approval_id.encode().hex(), 16) % 3 == 0 else "approve"
        self.pending_decisions[approval_id] = decision
        await self._send_decide(ws, approval_id, decision)

    async def _send_decide(self, ws, approval_id: str, decision: str) -> None:
        await ws.send(
            json.dumps(
                {
                    "type": "decide",
                    "request_id": f"d-{approval_id}",
                    "approval_id": approval_id,
                    "decision": decision,
                }
            )
        )

    def _error(self, frame: dict[str, Any]) -> None:
        rid = str(frame.get("request_id") or "")
        if frame.get("code") == "internal_error" and rid.startswith("w-"):
            self.internal_errors += 1  # a switch is not retried: nothing waits on it
            return
        if frame.get("code") == "internal_error" and rid[:2] in ("s-", "d-"):
            # The server failed on it (its database restarting) and did nothing.
            self.internal_errors += 1
            self.retry_at = asyncio.get_running_loop().time() + 1.0
            return
        if rid.startswith("d-") and frame.get("code") in (
            "already_decided",
            "not_pending",
            "approval_cancelled",
        ):
            # Another tab (or this one, before a cut) decided it first, or a
            # regenerate, an edit or a switch left its branch.
            self.pending_decisions.pop(rid[2:], None)
            return
        self.violations.append(f"{self.name}: error {frame}")
