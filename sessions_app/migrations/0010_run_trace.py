from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0009_branches"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="trace",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
