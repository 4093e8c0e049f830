"""Rotate the epoch of sessions (after restoring or rebuilding their logs).

Every tab following them is closed (1013), resumes, is told ``epoch_mismatch``,
drops its cache and reloads the session from the start, with a notice.
"""

from django.core.management.base import BaseCommand, CommandError

from sessions_app import fanout
from sessions_app.log.retention import rotate_epoch
from sessions_app.models import AgentSession


class Command(BaseCommand):
    help = "Give sessions a new epoch: open tabs drop their cache and reload from the start."

    def add_arguments(self, parser):
        parser.add_argument("session_ids", nargs="*", metavar="session_id")
        parser.add_argument(
            "--all", action="store_true", help="every session (after restoring a backup)"
        )

    def handle(self, session_ids, all=False, **options):  # noqa: A002 (the option's name)
        if all:
            session_ids = list(AgentSession.objects.values_list("id", flat=True))
        elif not session_ids:
            raise CommandError("name the sessions, or --all")
        missing = []
        for session_id in session_ids:
            epoch = rotate_epoch(session_id)
            if epoch is None:
                missing.append(session_id)
            else:
                self.stdout.write(f"{session_id}: epoch is now {epoch}")
        # Published from this process: out before it exits.
        fanout.publisher.flush()
        if missing:
            raise CommandError(f"no such session: {', '.join(missing)}")
