"""Purge the oldest events of a session's log (an explicit, operator-run step).

Clients whose cursor points before what is kept get ``cursor_expired`` with
``earliest`` on resume, and are told so: nothing is replayed with a hole.
"""

from django.core.management.base import BaseCommand, CommandError

from sessions_app.log.events import PurgeError, purge_events


class Command(BaseCommand):
    help = "Delete a session's events before a seq (keeping at least the newest one)."

    def add_arguments(self, parser):
        parser.add_argument("session_id")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--before", type=int, help="delete events with seq < BEFORE")
        group.add_argument("--keep", type=int, help="keep only the newest KEEP events")

    def handle(self, session_id, before=None, keep=None, **options):
        try:
            deleted, earliest = purge_events(session_id, before=before, keep=keep)
        except PurgeError as exc:
            raise CommandError(str(exc)) from None
        if not deleted:
            self.stdout.write(f"nothing to purge: earliest is already {earliest}")
            return
        self.stdout.write(f"purged {deleted} events of {session_id}; earliest is now {earliest}")
