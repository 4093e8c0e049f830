"""Events lose the index Django gives a foreign key (and its LIKE twin on
PostgreSQL): the (session, seq) unique index serves every lookup by session,
and every index is work on every append."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0005_append_many_function'),
    ]

    operations = [
        migrations.AlterField(
            model_name='event',
            name='session',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='sessions_app.agentsession'),
        ),
    ]
