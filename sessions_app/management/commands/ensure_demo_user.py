"""Create (once) the demo user and print how to log in."""

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo user if missing and print its login."

    def handle(self, *args, **options):
        # The password lives beside the SQLite file: stable across restarts,
        # different on every machine.
        path = settings.VAR_DIR / "demo_password"
        if not path.exists():
            settings.VAR_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
            # A superuser's password: readable by this user only.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(9))
        password = path.read_text().strip()
        User = get_user_model()
        user, created = User.objects.get_or_create(
            username="demo", defaults={"is_staff": True, "is_superuser": True}
        )
        if created or not user.check_password(password):
            user.set_password(password)
            user.save()
        port = os.environ.get("PORT", "8000")
        self.stdout.write(
            f"\n  Open http://127.0.0.1:{port}/ and log in as  demo / {password}\n"
            "  (the admin is at /admin/ with the same login)\n"
        )
