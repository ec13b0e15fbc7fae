# A replay run's owner and heartbeat: runs of a process that ended are taken up or failed (replay/worker.py).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('extproxy', '0007_node_sets'),
    ]

    operations = [
        migrations.AddField(
            model_name='replayrun',
            name='heartbeat_at',
            field=models.DateTimeField(null=True),
        ),
        migrations.AddField(
            model_name='replayrun',
            name='owner',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
    ]
