"""Purge the oldest events of a session's log (an explicit, operator-run step).

Clients whose cursor points before what is kept get ``cursor_expired`` with
``earliest`` on resume, and are told so: nothing is replayed with a hole.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from sessions_app.models import AgentSession, Event


class Command(BaseCommand):
    help = "Delete a session's events before a seq (keeping at least the newest one)."

    def add_arguments(self, parser):
        parser.add_argument("session_id")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--before", type=int, help="delete events with seq < BEFORE")
        group.add_argument("--keep", type=int, help="keep only the newest KEEP events")

    def handle(self, session_id, before=None, keep=None, **options):
        with transaction.atomic():
            session = AgentSession.objects.select_for_update().filter(id=session_id).first()
            if session is None:
                raise CommandError(f"no session {session_id}")
            if keep is not None:
                if keep < 1:
                    raise CommandError("--keep must be at least 1")
                before = session.head - keep + 1
            if before < 1 or before > session.head:
                raise CommandError(f"--before must be between 1 and head ({session.head})")
            if before <= session.earliest:
                self.stdout.write(f"nothing to purge: earliest is already {session.earliest}")
                return
            deleted, _ = Event.objects.filter(session=session, seq__lt=before).delete()
            AgentSession.objects.filter(id=session.id).update(earliest=before)
        self.stdout.write(f"purged {deleted} events of {session_id}; earliest is now {before}")
