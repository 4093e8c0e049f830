"""Routes of the REST API, mounted at /api/."""

from django.conf import settings
from django.urls import path
from rest_framework.permissions import BasePermission

from sessions_app.access.tokens import TokenAuthentication
from sessions_app.web import ag_ui, ai_sdk, api, policy, stream, tokens
from sessions_app.web.openapi import ApiDocs, ApiSchema


class DocsAllowed(BasePermission):
    """The schema and its docs page: signed-in users, or anyone where
    ``AGENT_PUBLIC_API_DOCS`` says so."""

    def has_permission(self, request, view) -> bool:
        if settings.AGENT_PUBLIC_API_DOCS:
            return True
        return bool(request.user and request.user.is_authenticated)


_docs = {
    "authentication_classes": [policy.CookieAuthentication, TokenAuthentication],
    "permission_classes": [DocsAllowed],
    "throttle_classes": [policy.ApiRateThrottle, policy.AnonApiRateThrottle],
}

urlpatterns = [
    path("sessions/", api.SessionList.as_view(), name="api-sessions"),
    path("sessions/<str:session_id>/", api.SessionDetail.as_view(), name="api-session"),
    path("sessions/<str:session_id>/events/", api.SessionEvents.as_view(), name="api-events"),
    path("sessions/<str:session_id>/messages/", api.SessionMessages.as_view(), name="api-messages"),
    path("sessions/<str:session_id>/stream/", stream.session_stream, name="api-stream"),
    path("sessions/<str:session_id>/tree/", api.SessionTree.as_view(), name="api-tree"),
    path("sessions/<str:session_id>/branch/", api.SessionBranch.as_view(), name="api-branch"),
    path("approvals/<str:approval_id>/decide/", api.ApprovalDecide.as_view(), name="api-decide"),
    path("runs/<str:run_id>/cancel/", api.RunCancel.as_view(), name="api-cancel"),
    # The AI SDK's UI message stream (docs/integrations.md): the paths its
    # DefaultChatTransport builds from ``api`` alone, no trailing slash.
    path("ai-sdk/chat", ai_sdk.chat, name="ai-sdk-chat"),
    path("ai-sdk/chat/<str:chat_id>/stream", ai_sdk.resume, name="ai-sdk-resume"),
    path("ai-sdk/chat/<str:chat_id>/messages", ai_sdk.messages, name="ai-sdk-messages"),
    # AG-UI (docs/integrations.md): a run, and a late joiner's stream.
    path("ag-ui/", ag_ui.run, name="ag-ui-run"),
    path("ag-ui/<str:thread_id>/stream", ag_ui.join, name="ag-ui-join"),
    path("tokens/", tokens.TokenList.as_view(), name="api-tokens"),
    path("tokens/<str:pk>/", tokens.TokenDetail.as_view(), name="api-token"),
    # OpenAPI 3 and its interactive docs (Swagger UI from the sidecar, its
    # init script served apart so that the page's strict CSP holds), with
    # their own settings: the same in a site that embeds the app.
    path("schema/", ApiSchema.as_view(**_docs), name="api-schema"),
    path("docs/", ApiDocs.as_view(url_name="api-schema", **_docs), name="api-docs"),
]
