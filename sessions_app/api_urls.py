"""Routes of the REST API, mounted at /api/."""

from django.urls import path

from . import api

urlpatterns = [
    path("sessions/", api.SessionList.as_view(), name="api-sessions"),
    path("sessions/<str:session_id>/", api.SessionDetail.as_view(), name="api-session"),
    path("sessions/<str:session_id>/events/", api.SessionEvents.as_view(), name="api-events"),
    path("approvals/<str:approval_id>/decide/", api.ApprovalDecide.as_view(), name="api-decide"),
    path("runs/<str:run_id>/cancel/", api.RunCancel.as_view(), name="api-cancel"),
]
