"""Conversation control in Chromium: stop and send (issue 23's first part).

The same scenario runs on the production profile across two servers
(``test_multitab_production.py``)."""

from __future__ import annotations

from tests.browser import scenarios


def test_stop_and_send_during_a_long_stream(server, ctx):
    """Tab A stops a long answer and sends at once; tab B watches; both show
    exactly the log, and the queued input runs after the new one."""
    scenarios.stop_and_send(ctx, server, server)
