from django.db import migrations, models

FINISHED = ("succeeded", "failed", "cancelled")


def mark_unfinished_runs_watched(apps, schema_editor):
    """Runs executing while the site is upgraded may have sockets opened by processes that do
    not mark what they watch yet: their events keep going to the channel layer."""
    Run = apps.get_model("orchestrator", "Run")
    Run.objects.exclude(status__in=FINISHED).update(watched=True)


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0016_run_queued_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="watched",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_unfinished_runs_watched, migrations.RunPython.noop),
    ]
