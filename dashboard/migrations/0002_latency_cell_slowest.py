from django.db import migrations, models

# A cell's slowest call: a percentile in its bucket is no higher (dashboard/backend_stats.py).
# Cells counted before it was kept get their bucket's upper edge, all that is known of them:
# the page shows them as it did, and the roll-up's max() over a cell stays an upper bound.
BUCKETS_PER_DECADE, FIRST_EDGE_MS = 4, 0.1  # dashboard/rollup.py's buckets (UPPER_EDGES_MS)


def edges_for_cells_counted_before(apps, schema_editor):
    cell = apps.get_model("dashboard", "LatencyCell")
    for bucket in cell.objects.values_list("bucket", flat=True).distinct():
        edge = FIRST_EDGE_MS * 10 ** ((bucket + 1) / BUCKETS_PER_DECADE)
        cell.objects.filter(bucket=bucket).update(slowest_ms=edge)


class Migration(migrations.Migration):

    dependencies = [
        ('dashboard', '0001_views'),
    ]

    operations = [
        migrations.AddField(
            model_name='latencycell',
            name='slowest_ms',
            field=models.FloatField(default=0.0),
            preserve_default=False,
        ),
        migrations.RunPython(edges_for_cells_counted_before, migrations.RunPython.noop),
    ]
