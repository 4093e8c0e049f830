"""What the REST tests share."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.fixture
def client_for():
    """A test client signed in as a user (``csrf``: enforce the CSRF check)."""

    def make(user, csrf=False):
        c = Client(enforce_csrf_checks=csrf)
        c.force_login(user)
        return c

    return make
