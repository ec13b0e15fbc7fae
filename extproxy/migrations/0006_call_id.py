"""Call.call_id: the unique id the hot path gives each call (existing rows get a fresh one)."""
import uuid

from django.db import migrations, models

import extproxy.models


def fill_call_ids(apps, schema_editor):
    # On the database being migrated, not the default one: through another connection, the
    # query would wait for this migration's own lock on the table (PostgreSQL), for good.
    calls = apps.get_model("extproxy", "Call").objects.using(schema_editor.connection.alias)
    batch = []
    for call in calls.filter(call_id__isnull=True).only("pk").iterator(chunk_size=2000):
        call.call_id = str(uuid.uuid4())
        batch.append(call)
        if len(batch) >= 2000:
            calls.bulk_update(batch, ["call_id"])
            batch = []
    if batch:
        calls.bulk_update(batch, ["call_id"])


class Migration(migrations.Migration):
    dependencies = [("extproxy", "0005_replay")]

    operations = [
        migrations.AddField(model_name="call", name="call_id", field=models.CharField(max_length=36, null=True)),
        migrations.RunPython(fill_call_ids, migrations.RunPython.noop),
        migrations.AlterField(model_name="call", name="call_id",
                              field=models.CharField(default=extproxy.models.new_call_id, max_length=36, unique=True)),
    ]
