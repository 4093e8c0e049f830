"""The built-in tools' limits across sessions and links
(sessions_app/runtime/tools.py): a user's workspaces share one quota, and
``terminal`` reads nothing through a file with a second hard link."""

from __future__ import annotations

import os

import pytest

from sessions_app.log.sessions import create_session
from sessions_app.runtime.registry import execute
from sessions_app.runtime.tools import workspace_for

pytestmark = pytest.mark.django_db


def test_a_users_workspaces_share_one_quota(user, other_user, settings, tmp_path):
    """AGENT_USER_WORKSPACES_MAX_BYTES counts every workspace of the user: a
    new session is no fresh quota (the review's was), another user's is theirs."""
    settings.AGENT_WORKSPACES = tmp_path
    settings.AGENT_USER_WORKSPACES_MAX_BYTES = 150
    first = workspace_for(create_session(user).id)
    second = workspace_for(create_session(user).id)
    theirs = workspace_for(create_session(other_user).id)
    assert execute("write_file", {"path": "a.txt", "text": "x" * 99}, first)[0]
    ok, message = execute("write_file", {"path": "b.txt", "text": "y" * 60}, second)
    assert not ok and "your workspaces' quota" in message and "150" in message
    assert not (second / "b.txt").exists()
    assert execute("write_file", {"path": "c.txt", "text": "z" * 99}, theirs)[0]


def test_terminal_reads_nothing_through_a_second_hard_link(settings, tmp_path):
    """``cat`` of a file with a second hard link (maybe one outside the
    workspace) is refused, as ``write_file`` refuses to write through one."""
    settings.AGENT_WORKSPACES = tmp_path / "workspaces"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    workspace = workspace_for("s_" + "a" * 22)
    os.link(outside / "secret.txt", workspace / "link.txt")
    ok, output = execute("terminal", {"command": "cat link.txt"}, workspace)
    assert not ok and "hard link" in output and "top secret" not in output
    ok, output = execute("terminal", {"command": "wc --files0-from=link.txt"}, workspace)
    assert not ok and "top secret" not in output
