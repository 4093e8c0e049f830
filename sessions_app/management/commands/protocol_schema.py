"""``manage.py protocol_schema [PATH]``: write the protocol's JSON Schema
(``sessions_app.wire.schema``; to standard output without a path)."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand

from sessions_app.wire.schema import document


def render() -> str:
    """The schema as text: one line per frame, so a change reads as one line."""
    doc = document()
    defs = doc.pop("$defs")
    head = json.dumps(doc, indent=2, ensure_ascii=False)[:-2]
    body = ",\n".join(
        f"    {json.dumps(k)}: {json.dumps(v, ensure_ascii=False, separators=(', ', ': '))}"
        for k, v in defs.items()
    )
    return f'{head},\n  "$defs": {{\n{body}\n  }}\n}}\n'


class Command(BaseCommand):
    help = "Write every frame of the session protocol as JSON Schema (docs/protocol.schema.json)."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help="where to write it (default: stdout)")

    def handle(self, *args, path=None, **options):
        if path is None:
            self.stdout.write(render(), ending="")
        else:
            Path(path).write_text(render())
