"""Apply the retention policy now (the sweeper also does, hourly).

Without options, the settings' ``AGENT_RETAIN_DELTAS_DAYS`` and
``AGENT_RETAIN_SESSIONS_DAYS``; 0 keeps everything of that kind.
"""

from django.core.management.base import BaseCommand

from sessions_app.log.retention import apply_retention


class Command(BaseCommand):
    help = "Purge superseded deltas and idle sessions older than the retention policy allows."

    def add_arguments(self, parser):
        parser.add_argument(
            "--deltas-days", type=float, help="purge superseded deltas of runs finished before"
        )
        parser.add_argument(
            "--sessions-days", type=float, help="delete sessions idle for longer than this"
        )

    def handle(self, deltas_days=None, sessions_days=None, **options):
        report = apply_retention(deltas_days=deltas_days, sessions_days=sessions_days)
        self.stdout.write(
            f"deleted {report.deltas_deleted} superseded deltas in "
            f"{report.sessions_compacted} sessions; deleted {report.sessions_deleted} sessions"
        )
