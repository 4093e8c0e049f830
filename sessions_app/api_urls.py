"""Routes of the REST API, mounted at /api/."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from . import api

urlpatterns = [
    path("sessions/", api.SessionList.as_view(), name="api-sessions"),
    path("sessions/<str:session_id>/", api.SessionDetail.as_view(), name="api-session"),
    path("sessions/<str:session_id>/events/", api.SessionEvents.as_view(), name="api-events"),
    path("sessions/<str:session_id>/messages/", api.SessionMessages.as_view(), name="api-messages"),
    path("approvals/<str:approval_id>/decide/", api.ApprovalDecide.as_view(), name="api-decide"),
    path("runs/<str:run_id>/cancel/", api.RunCancel.as_view(), name="api-cancel"),
    # OpenAPI 3 and its interactive docs (Swagger UI, its init script served
    # apart so that the page's strict CSP holds).
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]
