"""REST API (Django REST framework): sessions, their logs, messages, decisions, cancels.

Logged-in users only (session cookie with CSRF on writes, or a token for
programs); another user's session,
run or approval is 404, exactly like one that does not exist: every view's
``get_queryset`` is filtered by owner, the way ``rest_framework.generics``
intends. Decisions and cancels go through the same functions as the socket
and the admin; their domain errors become responses in ``exception_handler``
(``{"code", "message", ...}`` with the error's HTTP status).

``POST sessions/<id>/messages/`` is the socket's ``send``: the same
validation (``protocol.send_of``, as ``protocol.parse_send``) and the same idempotent function, so a
program that retries with the same ``client_message_id`` gets the first
result with ``status: "duplicate"`` and nothing is appended twice. The schema
(OpenAPI 3, drf-spectacular) is at ``/api/schema/``, its docs at ``/api/docs/``.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from sessions_app import fanout
from sessions_app.log.events import read_events
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.runtime import deciding, runs, turns
from sessions_app.runtime.gates import VIA_API, VIA_API_KEY, Decision
from sessions_app.server import tracing
from sessions_app.web.policy import Pipeline, exception_handler
from sessions_app.wire import decisions, frames
from sessions_app.wire import protocol as p
from sessions_app.wire.frames import event_frame

MAX_PAGE = 1000


class SessionPagination(PageNumberPagination):
    """Pages of sessions, newest first, with ``next``/``previous`` links."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class SessionSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentSession
        fields = ("id", "title", "status", "epoch", "head", "created_at", "updated_at")
        read_only_fields = ("id", "status", "epoch", "head", "created_at", "updated_at")


class CreateSessionSerializer(serializers.Serializer):
    title = serializers.CharField(max_length=p.MAX_TITLE_CHARS, allow_blank=True, required=False)


class MessageSerializer(serializers.Serializer):
    """A user input, as the socket's ``send``. What the schema shows: the body
    is checked by ``protocol.send_of``, as the socket's frame is, so the API
    and the socket refuse exactly the same inputs with the same codes."""

    client_message_id = serializers.CharField(
        max_length=p.MAX_ID_CHARS,
        help_text="Made by the client before the first attempt, kept across retries.",
    )
    text = serializers.CharField(
        max_length=p.MAX_TEXT_CHARS,
        required=False,
        help_text=(
            "Not white space only; no NUL; over 32,000 characters is too_large. "
            "Required, except with regenerate (which has none)."
        ),
    )
    regenerate = serializers.CharField(
        max_length=p.MAX_RUN_ID_CHARS,
        required=False,
        help_text=(
            "A run id: answer that run's message again with a new run, its "
            "sibling, which becomes the active path's leaf. Active runs stop first."
        ),
    )
    edit_of = serializers.CharField(
        max_length=p.MAX_RUN_ID_CHARS,
        required=False,
        help_text=(
            "A run id: send text as a new version of that run's message (a sibling "
            "of it, with a new run, now the leaf). Active runs stop first."
        ),
    )
    interrupt = serializers.BooleanField(
        required=False,
        default=False,
        help_text=(
            "Stop and send: cancel the session's active run (its run.finished says "
            "why) and start this input at once; the inputs already queued stay queued. "
            "Otherwise the input queues behind the active run."
        ),
    )


class SendResultSerializer(serializers.Serializer):
    client_message_id = serializers.CharField()
    seq = serializers.IntegerField(help_text="The seq of its user.message event.")
    run_id = serializers.CharField()
    status = serializers.ChoiceField(choices=(p.SEND_STARTED, p.SEND_QUEUED, p.SEND_DUPLICATE))


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class DecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=p.ALL_DECISIONS)
    # A denial's reason, which the model is told.
    reason = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, max_length=p.MAX_REASON_CHARS
    )
    # Every gate of its step still waiting, decided alike.
    all = serializers.BooleanField(required=False, default=False)
    # An edit's arguments (the tool's JSON schema checks them).
    args = serializers.JSONField(required=False, allow_null=True)
    # A response instead of the call: the model is told it as the result.
    response = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, max_length=p.MAX_RESPONSE_CHARS
    )
    # A question's answer: its form's fields (its schema checks them).
    answer = serializers.JSONField(required=False, allow_null=True)

    def validate(self, attrs):
        """The socket's rule, one copy (``wire.decisions``)."""
        try:
            return decisions.fields_of(attrs)
        except p.FrameError as exc:
            raise serializers.ValidationError({"decision": exc.message}) from None


class EventsQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, default=MAX_PAGE)


def fields(request) -> dict:
    """A command's fields from the request's body (nothing from one that is
    not an object: the constructor then names what is missing)."""
    return request.data if isinstance(request.data, dict) else {}


class AppView(Pipeline):
    """What every view of the API needs: the one policy (``web.policy.Pipeline``:
    the cookie or a key, a signed-in user, the rates, the bounded parsers),
    and the protocol's error codes."""

    def get_exception_handler(self):
        return exception_handler


class OwnedSessions(AppView):
    """Views over the requesting user's sessions only."""

    lookup_field = "id"
    lookup_url_kwarg = "session_id"

    def get_queryset(self):
        return AgentSession.objects.filter(owner=self.request.user)


class SessionList(OwnedSessions, generics.ListCreateAPIView):
    serializer_class = SessionSerializer
    pagination_class = SessionPagination

    def get_queryset(self):
        # A stable order, so pages neither skip nor repeat while sessions change.
        return super().get_queryset().order_by("-created_at", "id")

    def create(self, request, *args, **kwargs):
        body = CreateSessionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        session = create_session(request.user, body.validated_data.get("title", ""))
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionDetail(OwnedSessions, generics.RetrieveUpdateAPIView):
    """One session; its title may be changed (PATCH ``{"title"}``)."""

    serializer_class = SessionSerializer
    http_method_names = ["get", "patch", "head", "options"]

    def perform_update(self, serializer):
        session = serializer.save()
        # Every tab of the session shows it (``title`` frame), every list too.
        fanout.title_changed_on_commit(session.owner_id, session.id, session.title)


class SessionEvents(OwnedSessions, generics.GenericAPIView):
    """The log after a cursor: ``?after=N&limit=M`` (the same frames as the socket)."""

    serializer_class = SessionSerializer

    @extend_schema(
        parameters=[EventsQuerySerializer],
        responses=inline_serializer(
            "EventPage",
            {
                "session_id": serializers.CharField(),
                "epoch": serializers.CharField(),
                "head": serializers.IntegerField(),
                "events": serializers.ListField(child=serializers.DictField()),
            },
        ),
    )
    def get(self, request, session_id: str):
        session = self.get_object()
        query = EventsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        events = read_events(
            session.id, query.validated_data["after"], limit=query.validated_data["limit"]
        )
        return Response(
            {
                "session_id": session.id,
                "epoch": session.epoch,
                "head": session.head,
                "events": [event_frame(e) for e in events],
            }
        )


class SessionMessages(OwnedSessions, generics.GenericAPIView):
    """Send a user input to the session: the socket's ``send``, idempotent by
    ``client_message_id`` (201 when it was appended, 200 with ``duplicate``
    when it already was)."""

    spends = True

    serializer_class = MessageSerializer

    @extend_schema(
        request=MessageSerializer,
        responses={
            201: SendResultSerializer,
            200: OpenApiResponse(SendResultSerializer, description="already sent: duplicate"),
            400: ErrorSerializer,
            404: ErrorSerializer,
        },
    )
    def post(self, request, session_id: str):
        session = self.get_object()
        send = p.send_of(fields(request))
        with tracing.span("session.send", **{"session.id": session.id, "via": "rest"}):
            result = turns.send(
                session.id,
                send,
                turns.Sender(request.user.get_username(), tracing.carrier()),
            )
        created = result.status != p.SEND_DUPLICATE
        return Response(
            frames.send_result(result),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class TreeRunSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    parent_run_id = serializers.CharField(
        allow_null=True, help_text="The run this turn follows (null: the first turn)."
    )
    answers_run_id = serializers.CharField(
        help_text="The run whose user.message it answers (itself, unless regenerated)."
    )
    client_message_id = serializers.CharField()
    message_seq = serializers.IntegerField(help_text="The seq of the user.message it answers.")
    status = serializers.CharField()
    stop_reason = serializers.CharField(allow_blank=True)


class TreeSerializer(serializers.Serializer):
    leaf_run_id = serializers.CharField(allow_null=True)
    path = serializers.ListField(
        child=serializers.CharField(), help_text="The active path's runs, root first."
    )
    runs = TreeRunSerializer(many=True, help_text="Every run, oldest first.")


class SwitchSerializer(serializers.Serializer):
    run_id = serializers.CharField(
        max_length=p.MAX_RUN_ID_CHARS,
        help_text="Show the branch through this run: the leaf becomes its subtree's newest run.",
    )


class SessionTree(OwnedSessions, generics.GenericAPIView):
    """The conversation's tree and its active path (docs/protocol.md, "Branches")."""

    serializer_class = TreeSerializer

    def get(self, request, session_id: str):
        return Response(turns.tree_of(self.get_object().id))


class SessionBranch(OwnedSessions, generics.GenericAPIView):
    """Switch the active path (the socket's ``switch``): every tab follows it;
    the runs left behind stop, and their gates close as cancelled."""

    spends = True
    serializer_class = SwitchSerializer

    @extend_schema(
        request=SwitchSerializer,
        responses={
            200: inline_serializer(
                "Switched",
                {
                    "leaf_run_id": serializers.CharField(),
                    "path": serializers.ListField(child=serializers.CharField()),
                },
            ),
            400: ErrorSerializer,
            404: ErrorSerializer,
        },
    )
    def post(self, request, session_id: str):
        session = self.get_object()
        run_id = p.switch_of(fields(request))
        path = turns.switch(session.id, run_id, by=request.user.get_username())
        return Response({"leaf_run_id": path[-1], "path": path})


class ApprovalDecide(AppView, generics.GenericAPIView):
    spends = True
    serializer_class = DecisionSerializer
    lookup_url_kwarg = "approval_id"

    def get_queryset(self):
        return ApprovalRequest.objects.filter(session__owner=self.request.user)

    @extend_schema(
        responses=inline_serializer(
            "DecisionResult",
            {"approval_id": serializers.CharField(), "decision": serializers.CharField()},
        )
    )
    def post(self, request, approval_id: str):
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        approval = self.get_object()
        decision = body.validated_data["decision"]
        fields = body.validated_data
        via = VIA_API_KEY if request.auth else VIA_API  # an API key's id, or a cookie's None
        deciding.decide(approval.id, Decision.of(fields, request.user.get_username(), via))
        return Response({"approval_id": approval.id, "decision": decision})


class RunCancel(AppView, generics.GenericAPIView):
    spends = True
    lookup_url_kwarg = "run_id"
    serializer_class = None

    def get_queryset(self):
        return Run.objects.filter(session__owner=self.request.user)

    @extend_schema(
        request=None,
        responses=inline_serializer("CancelResult", {"run_id": serializers.CharField()}),
    )
    def post(self, request, run_id: str):
        run = self.get_object()
        runs.cancel(run.id, request.user.get_username())
        return Response({"run_id": run.id})
