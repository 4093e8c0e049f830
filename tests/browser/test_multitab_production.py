"""Cases 1, 3, 6 and 9 in the production profile: PostgreSQL + Redis, runs in
``run_agent_worker`` processes, and two daphne processes, tab A on one and tab
B on the other, so that everything B sees of A's actions crossed the Redis
channel layer.

Marked ``postgres``: outside that profile they are skipped with a loud reason
(tests/conftest.py), before any second server is started. Run them with

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentsessions \\
    REDIS_URL=redis://127.0.0.1:6379/5 \\
    .venv/bin/pytest tests/browser -m "browser and postgres"
"""

from __future__ import annotations

import pytest

from tests.browser import branching, scenarios

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("fault", ["offline", "server-close"])
def test_socket_lost_mid_run_resumes_without_hole_or_repeat_across_servers(
    server, server_b, ctx, fault
):
    scenarios.socket_lost_mid_run(ctx, server, server_b, fault)


def test_refresh_at_an_approval_gate_keeps_the_gate_across_servers(server, server_b, ctx):
    scenarios.refresh_at_gate(ctx, server, server_b)


def test_idle_tab_sees_short_runs_across_servers(server, server_b, ctx):
    scenarios.idle_tab_sees_short_run(ctx, server, server_b)


def test_server_restart_resumes_every_tab_across_servers(daphnes, ctx):
    """Both daphnes are killed -9 and restarted on their ports, during a stream
    (which goes on in its worker) and at a parked gate."""
    scenarios.server_restart(ctx, daphnes(), daphnes())


def test_epoch_rotation_reloads_tabs_on_both_servers(server, server_b, ctx, django_user_model):
    """The rotation made on one server's admin reaches the other server's tab
    through Redis: both reload with the notice and end with the log."""
    from tests.browser.test_long_sessions import epoch_rotation

    epoch_rotation(ctx, server, server_b, django_user_model)


def test_the_session_list_updates_across_servers(server, server_b, ctx):
    """The list on one server follows what a tab on the other does, through Redis."""
    from tests.browser.test_session_list import live_list

    live_list(ctx, server, server_b)


def test_stop_and_send_across_servers(server, server_b, ctx):
    """Stop and send from tab A while tab B, on the other server, watches."""
    scenarios.stop_and_send(ctx, server, server_b)


def test_regenerate_watched_across_servers(server, server_b, ctx):
    """A regenerate on one server; the tab on the other follows, refreshes, switches."""
    branching.regenerate_watched(ctx, server, server_b)


def test_a_gate_on_an_edited_branch_is_refused_across_servers(server, server_b, ctx):
    """The edit on one server closes the gate in the tab on the other; its
    approval from there and from REST is refused; the tool never runs."""
    branching.gate_on_edited_branch(ctx, server, server_b)


def test_a_restart_of_both_servers_during_a_regenerate(daphnes, ctx):
    """Both daphnes are killed -9 and restarted while the regenerated answer
    streams in its worker."""
    branching.restart_during_regenerate(ctx, daphnes(), daphnes())
