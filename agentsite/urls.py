"""URL configuration: admin, login/logout, the REST API and the pages."""

from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path


def healthz(request):
    """Liveness for load balancers and the test harness (no database)."""
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("healthz", healthz),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include("sessions_app.api_urls")),
    path("", include("sessions_app.urls")),
]
