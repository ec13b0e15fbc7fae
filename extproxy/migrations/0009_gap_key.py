# A gap row's key (where its drop was found), so two drops alike in every value are two rows.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('extproxy', '0008_replay_heartbeat'),
    ]

    operations = [
        migrations.AddField(
            model_name='recordinggap',
            name='key',
            field=models.CharField(max_length=32, null=True, unique=True),
        ),
    ]
