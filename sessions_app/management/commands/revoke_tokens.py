"""Revoke API keys: every key (after restoring a backup), a user's, or some by id.

A revoked key is refused from then on and its SSE streams end.
"""

from django.core.management.base import BaseCommand, CommandError

from sessions_app import fanout
from sessions_app.access import tokens
from sessions_app.models import ApiToken


class Command(BaseCommand):
    help = "Revoke API keys: --all (after restoring a backup), --user USERNAME, or by id."

    def add_arguments(self, parser):
        parser.add_argument("token_ids", nargs="*", metavar="token_id")
        parser.add_argument("--all", action="store_true", help="every key of every user")
        parser.add_argument("--user", help="every key of this user")

    def handle(self, token_ids, all=False, user=None, **options):  # noqa: A002 (the option)
        if all:
            chosen = ApiToken.objects.all()
        elif user:
            chosen = ApiToken.objects.filter(user__username=user)
        elif token_ids:
            chosen = ApiToken.objects.filter(pk__in=token_ids)
        else:
            raise CommandError("name the keys, or --user USERNAME, or --all")
        n = tokens.revoke(chosen)
        fanout.publisher.flush()  # published from this process: out before it exits
        self.stdout.write(f"{n} key(s) revoked")
