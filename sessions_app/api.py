"""REST API (Django REST framework): sessions, their logs, decisions, cancels.

Logged-in users only (session cookie, CSRF on writes); another user's session,
run or approval is 404, exactly like one that does not exist: every view's
``get_queryset`` is filtered by owner, the way ``rest_framework.generics``
intends. Decisions and cancels go through the same functions as the socket
and the admin; their domain errors become responses in ``exception_handler``
(``{"code", "message", ...}`` with the error's HTTP status).
"""

from __future__ import annotations

from rest_framework import generics, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from . import protocol as p
from .events import event_frame, read_events
from .exceptions import SessionError
from .models import AgentSession, ApprovalRequest, Run
from .runtime import runs
from .services import create_session

MAX_PAGE = 1000


def exception_handler(exc, context):
    """DRF's handler, plus the domain errors with their code and status."""
    if isinstance(exc, SessionError):
        return Response(exc.detail(), status=exc.status)
    return drf_exception_handler(exc, context)


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


class DecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=p.DECISIONS)


class EventsQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, default=MAX_PAGE)


class OwnedSessions:
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


class SessionDetail(OwnedSessions, generics.RetrieveAPIView):
    serializer_class = SessionSerializer


class SessionEvents(OwnedSessions, generics.GenericAPIView):
    """The log after a cursor: ``?after=N&limit=M`` (the same frames as the socket)."""

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


class ApprovalDecide(generics.GenericAPIView):
    serializer_class = DecisionSerializer
    lookup_url_kwarg = "approval_id"

    def get_queryset(self):
        return ApprovalRequest.objects.filter(session__owner=self.request.user)

    def post(self, request, approval_id: str):
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        approval = self.get_object()
        decision = body.validated_data["decision"]
        runs.decide(approval.id, decision, request.user.get_username())
        return Response({"approval_id": approval.id, "decision": decision})


class RunCancel(generics.GenericAPIView):
    lookup_url_kwarg = "run_id"

    def get_queryset(self):
        return Run.objects.filter(session__owner=self.request.user)

    def post(self, request, run_id: str):
        run = self.get_object()
        runs.cancel(run.id, request.user.get_username())
        return Response({"run_id": run.id})
