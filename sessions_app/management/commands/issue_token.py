"""Make an API key for a user and print it (the only time it is shown).

manage.py issue_token alice --name ci --days 30
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sessions_app.access import tokens


class Command(BaseCommand):
    help = "Make an API key for USER and print it once (the database keeps only its hash)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="what the key is for")
        parser.add_argument(
            "--days", type=int, default=None, help="days until it expires (0: never)"
        )

    def handle(self, username, name="", days=None, **options):
        user = get_user_model()._default_manager.filter(username=username).first()
        if user is None:
            raise CommandError(f"no such user: {username}")
        if days is not None and days < 0:
            raise CommandError("--days is 0 (never) or more")
        token, key = tokens.issue(user, name, days)
        expires = token.expires_at.isoformat() if token.expires_at else "never"
        self.stderr.write(f"key {token.id} for {username}, expires {expires}:")
        self.stdout.write(key)
