"""Roles with meaning (viewer, developer, auditor, admin) and the audit trail.

The groups of earlier releases are renamed so their members keep a role; their permissions
are set by roles.ensure_roles after the migration (the new permissions exist only then).
"""

from django.db import migrations, models


RENAMED = {"operators": "viewer", "developers": "developer", "auditors": "auditor"}


def rename_groups(apps, schema_editor):
    groups = apps.get_model("auth", "Group").objects.using(schema_editor.connection.alias)  # the migrated database's
    for old, new in RENAMED.items():
        if not groups.filter(name=new).exists():
            groups.filter(name=old).update(name=new)


def unrename_groups(apps, schema_editor):
    groups = apps.get_model("auth", "Group").objects.using(schema_editor.connection.alias)
    for old, new in RENAMED.items():
        if not groups.filter(name=old).exists():
            groups.filter(name=new).update(name=old)


class Migration(migrations.Migration):

    dependencies = [
        ('extproxy', '0001_initial'),
        ('auth', '0012_alter_user_first_name_max_length'),
    ]

    operations = [
        migrations.CreateModel(
            name='Access',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'permissions': [('view_calls', 'Read calls, pods, backends and the live feed'), ('view_bodies', 'Read request and response bodies; copy calls out'), ('replay_calls', 'Replay recorded calls'), ('export_calls', 'Export decision logs'), ('view_audit', 'Read and export the audit trail'), ('manage_access', 'Manage users, roles and API tokens')],
                'managed': False,
                'default_permissions': (),
            },
        ),
        migrations.CreateModel(
            name='AuditEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField()),
                ('actor', models.CharField(blank=True, max_length=150)),
                ('action', models.CharField(max_length=64)),
                ('target', models.CharField(blank=True, max_length=512)),
                ('source', models.CharField(blank=True, max_length=255)),
                ('detail', models.JSONField(default=dict)),
            ],
            options={
                'ordering': ['-at', '-id'],
                'default_permissions': (),
                'indexes': [models.Index(fields=['-at', '-id'], name='audit_newest'), models.Index(fields=['action', '-at'], name='audit_action'), models.Index(fields=['actor', '-at'], name='audit_actor')],
            },
        ),
        migrations.RunPython(rename_groups, unrename_groups),
    ]
