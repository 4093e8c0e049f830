"""REST API (Django REST framework): sessions, their logs, decisions, cancels.

Logged-in users only (session cookie, CSRF on writes); another user's session,
run or approval is 404, exactly like one that does not exist. Decisions and
cancels go through the same functions as the socket and the admin.
"""

from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.exceptions import NotFound as Http404
from rest_framework.response import Response
from rest_framework.views import APIView

from . import protocol as p
from .events import event_frame, read_events
from .exceptions import AlreadyDecided, NotFound, NotPending
from .models import AgentSession, ApprovalRequest, Run
from .runtime import runs
from .services import create_session, get_owned_session

MAX_PAGE = 1000


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


def _owned(request, session_id: str) -> AgentSession:
    session = get_owned_session(request.user, session_id)
    if session is None:
        raise Http404("no such session")
    return session


class SessionList(APIView):
    def get(self, request):
        sessions = AgentSession.objects.filter(owner=request.user)[:200]
        return Response(SessionSerializer(sessions, many=True).data)

    def post(self, request):
        body = CreateSessionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        session = create_session(request.user, body.validated_data.get("title", ""))
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionDetail(APIView):
    def get(self, request, session_id: str):
        return Response(SessionSerializer(_owned(request, session_id)).data)


class SessionEvents(APIView):
    """The log after a cursor: ``?after=N&limit=M`` (the same frames as the socket)."""

    def get(self, request, session_id: str):
        session = _owned(request, session_id)
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


class ApprovalDecide(APIView):
    def post(self, request, approval_id: str):
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not ApprovalRequest.objects.filter(id=approval_id, session__owner=request.user).exists():
            raise Http404("no such approval")
        try:
            approval = runs.decide(
                approval_id, body.validated_data["decision"], request.user.get_username()
            )
        except NotFound:
            raise Http404("no such approval") from None
        except AlreadyDecided as exc:
            return Response(
                {
                    "code": p.E_ALREADY_DECIDED,
                    "decision": exc.decision,
                    "decided_by": exc.decided_by,
                },
                status=status.HTTP_409_CONFLICT,
            )
        return Response({"approval_id": approval.id, "decision": body.validated_data["decision"]})


class RunCancel(APIView):
    def post(self, request, run_id: str):
        if not Run.objects.filter(id=run_id, session__owner=request.user).exists():
            raise Http404("no such run")
        try:
            runs.cancel(run_id, request.user.get_username())
        except NotFound:
            raise Http404("no such run") from None
        except NotPending:
            return Response(
                {"code": p.E_NOT_PENDING, "message": "this run has already finished"},
                status=status.HTTP_409_CONFLICT,
            )
        return Response({"run_id": run_id})
