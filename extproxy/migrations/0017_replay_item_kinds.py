"""Each replay item's kinds of change as rows of an index (run, kind, item): the run page and
the API find a page of one kind through it. An item's kinds are a list in its JSON column,
which no index of either database serves in id order (SQLite has no index over a list's
values; PostgreSQL's GIN tests containment but keeps no order), so finding one page read every
item of the run: 0.3 s (SQLite) to 0.7 s (PostgreSQL) a page at 100,000 items, and 50 to 100 ms
still with the list matched in SQL. Through this index, a page reads that kind's entries up to it.

The items stored before this get their rows here, read a thousand at a time by id (kinds only,
not the diffs): a run's items without them would not be listed under their kinds. The calls a
run could not replay are entered too (replay/paging.py NOT_REPLAYED).
"""

import django.db.models.deletion
from django.db import migrations, models

BATCH = 1000
MAX_KIND = 100  # the column's length (kinds are short words: "passed->failed", "part:ok->error")
NOT_REPLAYED = "(not replayed)"  # replay/paging.py: a call that could not be replayed
SKIPPED = "bind is not replayed unless allowed"  # the error text of a skipped bind (not an error)


def kinds_of_stored_items(apps, schema_editor):
    ReplayItem = apps.get_model("extproxy", "ReplayItem")
    ReplayItemKind = apps.get_model("extproxy", "ReplayItemKind")
    last = 0
    while True:
        batch = list(ReplayItem.objects.filter(pk__gt=last).exclude(changed=False, error="").order_by("pk")
                     .values_list("pk", "run_id", "kinds", "replay_id", "error")[:BATCH])
        if not batch:
            return
        ReplayItemKind.objects.bulk_create([
            ReplayItemKind(run_id=run_id, item_id=pk, kind=str(kind)[:MAX_KIND])
            for pk, run_id, kinds, replay_id, error in batch
            for kind in (kinds if isinstance(kinds, list) else [])
            + ([NOT_REPLAYED] if error and replay_id is None and not error.startswith(SKIPPED) else [])])
        last = batch[-1][0]


class Migration(migrations.Migration):

    dependencies = [
        ('extproxy', '0016_spool_report'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReplayItemKind',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(max_length=100)),
                ('item', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='kind_rows', to='extproxy.replayitem')),
                ('run', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='extproxy.replayrun')),
            ],
            options={
                'default_permissions': (),
                'indexes': [models.Index(fields=['run', 'kind', 'item'], name='replayitemkind_page')],
            },
        ),
        migrations.RunPython(kinds_of_stored_items, migrations.RunPython.noop),
    ]
