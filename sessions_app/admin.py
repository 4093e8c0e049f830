"""Django's admin autodiscovery imports ``<app>.admin``; the admin itself
lives with the other web pages, in ``web/admin.py``."""

from sessions_app.web import admin  # noqa: F401  (registers the model admins)
