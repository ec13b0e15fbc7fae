"""Call.call_id: the unique id the hot path gives each call (existing rows get a fresh one)."""
import uuid

from django.db import migrations, models

import extproxy.models


def fill_call_ids(apps, schema_editor):
    Call = apps.get_model("extproxy", "Call")
    batch = []
    for call in Call.objects.filter(call_id__isnull=True).only("pk").iterator(chunk_size=2000):
        call.call_id = str(uuid.uuid4())
        batch.append(call)
        if len(batch) >= 2000:
            Call.objects.bulk_update(batch, ["call_id"])
            batch = []
    if batch:
        Call.objects.bulk_update(batch, ["call_id"])


class Migration(migrations.Migration):
    dependencies = [("extproxy", "0005_replay")]

    operations = [
        migrations.AddField(model_name="call", name="call_id", field=models.CharField(max_length=36, null=True)),
        migrations.RunPython(fill_call_ids, migrations.RunPython.noop),
        migrations.AlterField(model_name="call", name="call_id",
                              field=models.CharField(default=extproxy.models.new_call_id, max_length=36, unique=True)),
    ]
