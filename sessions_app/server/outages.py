"""A database that is briefly away is a 503 that says when to come back,
never a 500 that stays.

``UnavailableMiddleware`` (async-capable: no thread of its own) turns a
view's ``OperationalError`` or ``InterfaceError`` (PostgreSQL restarting,
PgBouncer gone, a connection cut) into 503 with ``Retry-After``: JSON
(``{"code": "unavailable", "message", "retry_after"}``, the API's shape)
for the API and any client that asks for JSON, and for a page a short one
that reloads itself after that many seconds, so a page loaded in the window
recovers on its own. Other database errors (an integrity error, a bug) are
left to Django: they are not an outage, and retrying would not help.
The outage is logged as one line for many (``logs.Outage``).
"""

from __future__ import annotations

import logging
import time

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from sessions_app.server.access_log import plain
from sessions_app.server.logs import Outage
from sessions_app.server.middleware import Middleware

log = logging.getLogger("sessions_app.server.outages")

RETRY_AFTER_SECONDS = 5
OUTAGE_ERRORS = (OperationalError, InterfaceError)
_outage = Outage(log)

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{seconds}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Back in a moment</title></head>
<body><h1>Back in a moment</h1>
<p>The service cannot reach its database just now. This page loads again by
itself in {seconds} seconds; nothing you sent is lost.</p></body></html>
"""


def wants_json(request: HttpRequest) -> bool:
    accept = request.headers.get("Accept", "")
    return "/api/" in request.path or ("json" in accept and "html" not in accept)


def unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The 503 for ``request``, whose view met ``exc`` (an outage)."""
    _outage.error("a view's database read", exc, time.monotonic(), path=plain(request.path[:200]))
    seconds = RETRY_AFTER_SECONDS
    if wants_json(request):
        response: HttpResponse = JsonResponse(
            {
                "code": "unavailable",
                "message": f"the database is briefly unavailable: try again in {seconds} s",
                "retry_after": seconds,
            },
            status=503,
        )
    else:
        response = HttpResponse(PAGE.format(seconds=seconds), status=503)
    response["Retry-After"] = str(seconds)
    response["Cache-Control"] = "no-store"
    # Logged above, one line for many: not again by Django, a line a request.
    response._has_been_logged = True
    return response


class UnavailableMiddleware(Middleware):
    """See the module's comment. Sync or async, as the stack around it is."""

    def process_exception(self, request, exception):
        if isinstance(exception, OUTAGE_ERRORS):
            return unavailable(request, exception)
        return None
