"""URL configuration: admin, login/logout, the REST API and the pages."""

from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.http import HttpResponse
from django.urls import include, path

from sessions_app.server.metrics import database_metrics_view, metrics_view, readyz


def healthz(request):
    """Liveness for load balancers and the test harness (no database)."""
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics_view),
    path("metrics/database", database_metrics_view),
    path("admin/", admin.site.urls),
    # The app's sign-in page (templates/sessions_app/login.html); the rest of
    # Django's auth views as they come.
    path(
        "accounts/login/", LoginView.as_view(template_name="sessions_app/login.html"), name="login"
    ),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include("sessions_app.web.api_urls")),
    path("", include("sessions_app.urls")),
]
