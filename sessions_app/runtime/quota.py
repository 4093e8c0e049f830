"""The built-in tools' disk quotas: one workspace's (bytes, and files and
directories) and one user's across all their sessions' workspaces, checked
before a write touches anything (``runtime.tools``)."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from sessions_app.wire.protocol import is_session_id


class Refused(Exception):
    """A tool call refused before it touched anything; the message is the reason."""


def workspace_usage(root: Path) -> tuple[int, int]:
    """The bytes of the workspace's files and how many entries (files and
    directories) it holds; symlinks are not followed."""
    size = entries = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as listing:
            for entry in listing:
                entries += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    size += entry.stat(follow_symlinks=False).st_size
    return size, entries


def owner_usage(root: Path) -> int:
    """The bytes of every workspace of the owner of ``root``'s session (0 for
    a directory that is no session's workspace)."""
    from sessions_app.models import AgentSession

    if not is_session_id(root.name):
        return 0
    owner = AgentSession.objects.filter(id=root.name).values_list("owner_id", flat=True)
    base = Path(settings.AGENT_WORKSPACES)
    total = 0
    for session_id in AgentSession.objects.filter(owner_id__in=owner).values_list("id", flat=True):
        path = base / session_id
        if path.is_dir() and not path.is_symlink():
            total += workspace_usage(path)[0]
    return total


def check_quota(parts: list[str], root: Path, adding: int) -> None:
    """Refuse a write past the workspace's quota (``AGENT_WORKSPACE_MAX_BYTES``
    and ``AGENT_WORKSPACE_MAX_FILES``) or its owner's across their sessions
    (``AGENT_USER_WORKSPACES_MAX_BYTES``: a new session is no fresh quota),
    before anything is touched."""
    size, entries = workspace_usage(root)
    limit = settings.AGENT_WORKSPACE_MAX_BYTES
    if size + adding > limit:
        raise Refused(
            f"the workspace quota is reached: {size:,} of {limit:,} bytes used, "
            f"this write adds {adding:,}"
        )
    user_limit = settings.AGENT_USER_WORKSPACES_MAX_BYTES
    if user_limit:
        used = owner_usage(root)
        if used + adding > user_limit:
            raise Refused(
                f"your workspaces' quota is reached: {used:,} of {user_limit:,} bytes "
                f"used across your sessions, this write adds {adding:,}"
            )
    new = sum(1 for i in range(len(parts)) if not root.joinpath(*parts[: i + 1]).exists())
    if new and entries + new > settings.AGENT_WORKSPACE_MAX_FILES:
        raise Refused(
            f"the workspace quota is reached: {entries:,} of "
            f"{settings.AGENT_WORKSPACE_MAX_FILES:,} files and directories"
        )
