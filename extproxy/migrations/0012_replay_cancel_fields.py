"""A replay's cancel in fields of its own (replay/cancel.py), no longer as text in its `error`.

Runs cancelled before this have "cancelled by <who>" in `error` (with " (asked after the last
call: the run had finished)" when the run had ended first): moved into the fields, `error`
cleared, so that they read as cancelled as the new ones do. When the ask was made is not
known for those: the run's end stands in for it (its creation when it never ended).
"""

from django.db import migrations, models

CANCELLED_BY = "cancelled by "
AFTER_THE_END = " (asked after the last call: the run had finished)"


def fields_from_error(apps, schema_editor):
    ReplayRun = apps.get_model("extproxy", "ReplayRun")
    for run in ReplayRun.objects.filter(error__startswith=CANCELLED_BY).iterator(chunk_size=500):
        who = run.error[len(CANCELLED_BY):]
        if who.endswith(AFTER_THE_END):
            who = who[: -len(AFTER_THE_END)]
        ReplayRun.objects.filter(pk=run.pk).update(
            cancel_requested_by=who[:150], cancel_requested_at=run.finished_at or run.created_at, error="")


def error_from_fields(apps, schema_editor):
    ReplayRun = apps.get_model("extproxy", "ReplayRun")
    asked = ReplayRun.objects.filter(cancel_requested_at__isnull=False, error="")
    for run in asked.iterator(chunk_size=500):
        note = f"{CANCELLED_BY}{run.cancel_requested_by}" + (AFTER_THE_END if run.status == "done" else "")
        ReplayRun.objects.filter(pk=run.pk).update(error=note)


class Migration(migrations.Migration):

    dependencies = [
        ('extproxy', '0011_call_replay_newest'),
    ]

    operations = [
        migrations.AddField(
            model_name='replayrun',
            name='cancel_requested_by',
            field=models.CharField(blank=True, default='', max_length=150),
        ),
        migrations.AddField(
            model_name='replayrun',
            name='cancel_requested_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(fields_from_error, error_from_fields),
    ]
