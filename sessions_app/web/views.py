"""The pages: the session list, "New session" and the session page.

The session page is a shell: the transcript is rendered by the client
(``static/sessions_app/js/app.js``) from its per-tab cache and the WebSocket replay, so the
view passes only the session id, its title and whether the test hooks are on.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ImproperlyConfigured
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from sessions_app.log import sessions as services
from sessions_app.models import AgentSession
from sessions_app.runtime import notify
from sessions_app.runtime.agents import get_agent
from sessions_app.wire import protocol as p


@require_GET
@never_cache
@login_required
def session_list(request):
    """The user's sessions, most recently active first."""
    # One more than is shown: whether the list is cut short (and says so).
    sessions = list(
        services.listed(AgentSession.objects.filter(owner=request.user))[: services.MAX_LISTED + 1]
    )
    truncated = len(sessions) > services.MAX_LISTED
    sessions = sessions[: services.MAX_LISTED]
    now = timezone.now()
    for s in sessions:
        s.last_activity = _ago(s.updated_at, now)
    return render(
        request,
        "sessions_app/list.html",
        {
            "sessions": sessions,
            "max_title": p.MAX_TITLE_CHARS,
            "truncated": truncated,
            "max_listed": services.MAX_LISTED,
        },
    )


def _ago(when, now) -> str:
    """'just now', or '5 minutes ago'."""
    if (now - when).total_seconds() < 60:
        return "just now"
    return f"{timesince(when, now, depth=1)} ago"


@require_POST
@login_required
def new_session(request):
    """Create a session (its ``session.created`` is seq 1) and open it."""
    title = (request.POST.get("title") or "").strip()[: p.MAX_TITLE_CHARS]
    session = services.create_session(request.user, title)
    return redirect("sessions_app:session", session_id=session.id)


@require_GET
@never_cache
@login_required
def session_page(request, session_id: str):
    """One session; 404 for a session the user does not own (no enumeration)."""
    session = services.get_owned_session(request.user, session_id)
    if session is None:
        raise Http404("No such session.")
    return render(
        request,
        "sessions_app/session.html",
        {
            "session": session,
            "test_hooks": bool(settings.AGENT_TEST_HOOKS),
            "max_text": p.MAX_TEXT_CHARS,
            "hints": agent_hints(),
        },
    )


@require_GET
@never_cache
@login_required
def gate_link(request, token: str):
    """A notice's link (``runtime.notify``): for its gate's owner, signed in,
    once and before it expires, the session at that gate (the card is
    shown and focused: ``#gate-<id>``); otherwise a page saying why not
    (410). Opening it decides nothing."""
    try:
        gate = notify.open_link(token, request.user)
    except notify.LinkRefused as refused:
        return render(request, "sessions_app/gate_link.html", {"why": str(refused)}, status=410)
    url = reverse("sessions_app:session", args=[gate.session_id])
    return redirect(f"{url}#gate-{gate.id}")


def agent_hints() -> list[str]:
    """What the composer suggests trying: the agent's own ``hints`` (a list of
    inputs), none for an agent without them (docs/agents.md, "Hints")."""
    try:
        hints = getattr(get_agent(), "hints", None) or []
    except ImproperlyConfigured:  # named by check E002, at start
        return []
    return [str(hint) for hint in hints if isinstance(hint, str)][:5]
