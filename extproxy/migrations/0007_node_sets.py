"""The node index becomes one set of (node, verdict) pairs per distinct set, which each call
points at (Call.node_set), instead of one CallNode row per pair and call. Existing rows move."""
import hashlib

import django.db.models.deletion
from django.db import migrations, models
from django.utils import timezone

import msgspec


def move_call_nodes(apps, schema_editor):
    # Digest as extproxy.nodeindex.digest_of (kept here: a migration must not change with the code).
    # On the database being migrated (see 0006_call_id.fill_call_ids).
    db = schema_editor.connection.alias
    calls, call_nodes = (apps.get_model("extproxy", m).objects.using(db) for m in ("Call", "CallNode"))
    NodeSet, NodeSetEntry = apps.get_model("extproxy", "NodeSet"), apps.get_model("extproxy", "NodeSetEntry")
    now = timezone.now()
    known: dict[str, int] = {}
    last = 0
    while True:
        moving = list(call_nodes.filter(call_id__gt=last).order_by("call_id")
                      .values_list("call_id", flat=True).distinct()[:2000])
        if not moving:
            return
        pairs: dict[int, set] = {}
        for call, node, result in call_nodes.filter(call_id__in=moving).values_list("call_id", "node", "result"):
            pairs.setdefault(call, set()).add((node, result))
        for call, found in pairs.items():
            ordered = sorted(found)
            digest = hashlib.sha256(msgspec.json.encode(ordered)).hexdigest()
            if digest not in known:
                node_set, created = NodeSet.objects.using(db).get_or_create(
                    digest=digest, defaults={"size": len(ordered), "last_seen": now})
                if created:
                    NodeSetEntry.objects.using(db).bulk_create(
                        [NodeSetEntry(node_set=node_set, node=n, result=r) for n, r in ordered])
                known[digest] = node_set.pk
            calls.filter(pk=call).update(node_set_id=known[digest])
        last = moving[-1]


class Migration(migrations.Migration):

    dependencies = [
        ('extproxy', '0006_call_id'),
    ]

    operations = [
        migrations.CreateModel(
            name='NodeSet',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(max_length=64, unique=True)),
                ('size', models.IntegerField(default=0)),
                ('last_seen', models.DateTimeField(db_index=True)),
            ],
            options={
                'default_permissions': (),
            },
        ),
        migrations.AddField(
            model_name='call',
            name='node_set',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='extproxy.nodeset'),
        ),
        migrations.CreateModel(
            name='NodeSetEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('node', models.CharField(max_length=253)),
                ('result', models.CharField(blank=True, max_length=16)),
                ('node_set', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='entries', to='extproxy.nodeset')),
            ],
            options={
                'default_permissions': (),
            },
        ),
        migrations.AddIndex(
            model_name='nodesetentry',
            index=models.Index(fields=['node', 'result', 'node_set'], name='nodesetentry_node'),
        ),
        migrations.AddIndex(
            model_name='nodesetentry',
            index=models.Index(fields=['node_set'], name='nodesetentry_set'),
        ),
        migrations.RunPython(move_call_nodes, migrations.RunPython.noop),
        migrations.DeleteModel(
            name='CallNode',
        ),
    ]
