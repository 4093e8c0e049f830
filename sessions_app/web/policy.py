"""One HTTP policy: who may ask, decided as the REST API decides it, for
every endpoint.

The REST API's views are DRF's (``web.api.AppView``, a ``Pipeline``):
authentication by the session cookie (``CookieAuthentication``: the body's size, then CSRF, on a
cookie's write) or ``Authorization: Token …`` (``access.tokens``), a
signed-in user, and the user's rates (``AGENT_API_RATE``, and
``AGENT_API_SEND_RATE`` for what starts work). The streamed endpoints (the
native SSE stream, the AI SDK's and AG-UI's) are async views that DRF does
not serve; ``admit`` runs the same pipeline with the same classes for them,
in one trip to the database pool, and a refusal is ``Refused``: the same
status, code and headers (``Retry-After``) as the REST API's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.authentication import CSRFCheck, SessionAuthentication
from rest_framework.exceptions import ParseError, Throttled
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.permissions import SAFE_METHODS, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from sessions_app.access.tokens import TokenAuthentication, names_a_key
from sessions_app.server.db_pool import in_db_pool
from sessions_app.wire import bodies
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import SessionError

NOT_SIGNED_IN = "sign in, or send Authorization: Token …"


class Refused(Exception):
    """A request refused before its stream starts: a JSON error response."""

    def __init__(
        self, status: int, code: str, message: str, body: dict | None = None, **headers: str
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers
        self.body = body or {"code": code, "message": message}

    def response(self) -> JsonResponse:
        response = JsonResponse(self.body, status=self.status)
        for name, value in self.headers.items():
            response[name.replace("_", "-")] = value
        return response

    @classmethod
    def from_error(cls, error: SessionError | p.FrameError) -> Refused:
        if isinstance(error, p.FrameError):
            return cls(400, error.code, error.message)
        return cls(error.status, error.code, error.message)


class TooLarge(exceptions.APIException):
    status_code = 413
    default_code = p.E_TOO_LARGE
    default_detail = (
        "the body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE: send only the new message"
    )


class CsrfFailed(exceptions.PermissionDenied):
    default_code = "csrf_failed"


class CookieAuthentication(SessionAuthentication):
    """DRF's session authentication, for a request that names no key (one
    that sends ``Authorization: Token …`` is the key's, cookie or not), and
    in this order on a cookie's write: the user known, then the body's size
    (413; nobody's body is read before they are known), then CSRF, on the
    Django request (which parses a form body only, never JSON: the body is
    parsed once, by whoever asked for it)."""

    def authenticate(self, request):
        if names_a_key(request.META.get("HTTP_AUTHORIZATION", "")):
            return None
        return super().authenticate(request)

    def enforce_csrf(self, request) -> None:
        plain = request._request  # the HttpRequest under DRF's (documented)
        if plain.method in SAFE_METHODS:
            return
        try:
            plain.body  # noqa: B018  (read now: 413 before the CSRF check)
        except RequestDataTooBig:
            raise TooLarge() from None
        check = CSRFCheck(lambda _request: None)
        check.process_request(plain)
        reason = check.process_view(plain, None, (), {})
        if reason:
            raise CsrfFailed(f"CSRF Failed: {reason}")


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser through ``wire.bodies``: a body nested too deep is
    a 400 with a JSON reason, never a 500."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return bodies.loads(stream.read() if stream is not None else b"")
        except p.FrameError as error:
            raise ParseError(error.message) from None


@dataclass
class Caller:
    """Who is asking, once admitted: the user, and the API key's id when it
    signed in with one (its revocation ends its streams)."""

    user: Any
    token_id: str | None

    @property
    def granted(self) -> tuple[int, str]:
        return (self.user.pk, getattr(self.user, "password", ""))


class ApiRateThrottle(UserRateThrottle):
    """Every request of a user to the API: ``AGENT_API_RATE``."""

    scope = "agent_api"

    def get_rate(self) -> str:
        return settings.AGENT_API_RATE


class AnonApiRateThrottle(AnonRateThrottle):
    """Anonymous requests (the schema and docs, where public), per address."""

    scope = "agent_api_anon"

    def get_rate(self) -> str:
        return settings.AGENT_API_RATE


class SendRateThrottle(UserRateThrottle):
    """What starts work or spends (a message, a decision, a cancel):
    ``AGENT_API_SEND_RATE``, on top of the general rate."""

    scope = "agent_send"

    def get_rate(self) -> str:
        return settings.AGENT_API_SEND_RATE


class Pipeline:
    """Who may ask, for every view, DRF's or not, whatever the project's
    REST_FRAMEWORK defaults are (a project embedding the app may allow
    anonymous access elsewhere): the session cookie or a key, a signed-in
    user, a rate per user (429 with ``Retry-After`` past it; counted in
    Django's cache, so per process unless the project's cache is shared).
    ``spends``: the request starts work (``AGENT_API_SEND_RATE`` too, on a
    POST)."""

    authentication_classes = [CookieAuthentication, TokenAuthentication]
    permission_classes = [IsAuthenticated]
    throttle_classes = [ApiRateThrottle]
    parser_classes = [BoundedJSONParser, FormParser, MultiPartParser]
    spends = False

    def get_throttles(self):
        throttles = [ApiRateThrottle()]
        if self.request.method == "POST" and self.spends:
            throttles.append(SendRateThrottle())
        return throttles


def exception_handler(exc, context):
    """How every refusal is answered, the REST API's and the streamed
    endpoints' alike: DRF's handler, with the protocol's ``code`` and
    ``message`` beside its ``detail``, and the domain errors with their code
    and status."""
    if isinstance(exc, SessionError):
        return Response(exc.detail(), status=exc.status)
    if isinstance(exc, p.FrameError):
        # A body the protocol's parser refused: the socket's error, as a 400.
        return Response({"code": exc.code, "message": exc.message}, status=400)
    if isinstance(exc, ParseError):
        return Response({"code": p.E_BAD_JSON, "message": str(exc.detail)}, status=400)
    if isinstance(exc, Throttled):
        # The protocol's shape, as ``too_many_runs``' 429 has it.
        retry = int(exc.wait or 1)
        return Response(
            {
                "code": "throttled",
                "message": f"too many requests: try again in {retry} s",
                "retry_after": retry,
            },
            status=429,
            headers={"Retry-After": str(retry)},
        )
    response = drf_exception_handler(exc, context)
    data = response.data if response is not None else None
    detail = data.get("detail") if isinstance(data, dict) else None
    if isinstance(detail, str):
        code = getattr(detail, "code", "refused")
        message = NOT_SIGNED_IN if code == "not_authenticated" else str(detail)
        response.data.update(code=code, message=message)
    return response


class Policy(Pipeline, APIView):
    """``Pipeline`` run for a view DRF does not serve (a streamed response)."""

    def __init__(self, spends: bool = False) -> None:
        super().__init__()
        self.spends = spends

    def admit(self, request: HttpRequest) -> Caller:
        """Sync (on the pool): the caller, or ``Refused`` as the REST API
        would answer."""
        drf = self.initialize_request(request)
        self.request, self.args, self.kwargs, self.format_kwarg = drf, (), {}, None
        try:
            self.perform_authentication(drf)
            self.check_permissions(drf)
            self.check_throttles(drf)
        except exceptions.APIException as exc:
            raise self.refusal(exc) from None
        request.user = drf.user
        return Caller(drf.user, drf.auth if isinstance(drf.auth, str) else None)

    def refusal(self, exc: exceptions.APIException) -> Refused:
        """The REST API's answer to ``exc`` (its handler's), as a ``Refused``."""
        answer = self.handle_exception(exc)
        headers = {
            name: answer[name] for name in ("Retry-After", "WWW-Authenticate") if name in answer
        }
        data = answer.data if isinstance(answer.data, dict) else {}
        code = data.get("code") or exc.default_code
        message = data.get("message") or str(exc.detail)
        return Refused(answer.status_code, code, message, body=data or None, **headers)

    def get_exception_handler(self):
        return exception_handler


async def admit(request: HttpRequest, spends: bool = False) -> Caller:
    """``Policy.admit`` on the database pool (one trip: the user, CSRF, rates)."""
    return await in_db_pool(Policy(spends).admit)(request)
