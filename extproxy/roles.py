"""The roles, as groups with permissions, created after every migrate.

operators: watch calls; developers: watch and replay; auditors: watch and export.
"""
ROLES = {
    "operators": ["view_call", "view_backendcall", "view_configuredbackend"],
    "developers": ["view_call", "view_backendcall", "view_configuredbackend"],
    "auditors": ["view_call", "view_backendcall", "view_configuredbackend"],
}


def ensure_roles(sender=None, **kwargs) -> None:
    from django.contrib.auth.models import Group, Permission

    for role, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        perms = Permission.objects.filter(content_type__app_label="extproxy", codename__in=codenames)
        group.permissions.add(*perms)
