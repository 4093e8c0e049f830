"""Page routes: the session list, new session, the session page, and the
link a notice carries (it opens the session at its gate)."""

from django.urls import path

from sessions_app.web import views

app_name = "sessions_app"

urlpatterns = [
    path("", views.session_list, name="list"),
    path("sessions/new/", views.new_session, name="new"),
    path("s/<str:session_id>/", views.session_page, name="session"),
    path("gate/<str:token>/", views.gate_link, name="gate-link"),
]
