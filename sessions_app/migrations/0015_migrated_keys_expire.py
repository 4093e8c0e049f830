"""Keys that 0012 hashed from DRF's plain-text table before it set an expiry
get the configured one (``AGENT_TOKEN_DAYS`` from this migration on; 0: they
keep none), as every key made since has."""

import datetime

from django.conf import settings
from django.db import migrations
from django.utils import timezone

MIGRATED = "made before keys were hashed"


def expire_migrated_keys(apps, schema_editor):
    days = getattr(settings, "AGENT_TOKEN_DAYS", 90)
    if not days:
        return
    ApiToken = apps.get_model("sessions_app", "ApiToken")
    ApiToken.objects.filter(name=MIGRATED, expires_at__isnull=True).update(
        expires_at=timezone.now() + datetime.timedelta(days=days)
    )


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0014_session_external_id")]

    operations = [migrations.RunPython(expire_migrated_keys, migrations.RunPython.noop)]
