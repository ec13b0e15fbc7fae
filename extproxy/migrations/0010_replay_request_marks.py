# A replay item keeps what redaction changed in the request its target got (a change may be the
# redaction's), and a run counts such items.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('extproxy', '0009_gap_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='replayitem',
            name='request_marks',
            field=models.JSONField(default=list),
        ),
        migrations.AddField(
            model_name='replayrun',
            name='redacted',
            field=models.IntegerField(default=0),
        ),
    ]
