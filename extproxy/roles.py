"""The roles: which permission each role holds, and the checks views use.

Roles are Django groups; permissions are custom ones declared on `models.Access` (a model
without a table that only carries them). viewer reads calls, pods and backends; developer adds
bodies, replay and copy-out; auditor adds export and the audit trail; admin holds everything,
including users, roles and tokens. `ensure_roles` (after every migrate) brings the groups'
permissions in line with ROLES, so a changed table takes effect on the next start.

Views never test group names: they check one permission (`requires` for Django views,
`extproxy.api.permissions.needs` for the API, `required_permission` on consumers), so the
meta-test (tests/test_roles.py) can see that every route checks one. This module must not
import models at import time (settings and apps import it early).
"""
from __future__ import annotations

from functools import wraps
from typing import Any, Callable


class Perm:
    """Permission strings as `user.has_perm` takes them."""

    VIEW_CALLS = "extproxy.view_calls"
    VIEW_BODIES = "extproxy.view_bodies"
    REPLAY_CALLS = "extproxy.replay_calls"
    EXPORT_CALLS = "extproxy.export_calls"
    VIEW_AUDIT = "extproxy.view_audit"
    MANAGE_ACCESS = "extproxy.manage_access"


# (codename, description) of the custom permissions, for models.Access.Meta.
PERMISSIONS = [
    ("view_calls", "Read calls, pods, backends and the live feed"),
    ("view_bodies", "Read request and response bodies; copy calls out"),
    ("replay_calls", "Replay recorded calls"),
    ("export_calls", "Export decision logs"),
    ("view_audit", "Read and export the audit trail"),
    ("manage_access", "Manage users, roles and API tokens"),
]

VIEWER = [Perm.VIEW_CALLS]
ROLES: dict[str, list[str]] = {
    "viewer": VIEWER,
    "developer": VIEWER + [Perm.VIEW_BODIES, Perm.REPLAY_CALLS],
    "auditor": VIEWER + [Perm.EXPORT_CALLS, Perm.VIEW_AUDIT],
    "admin": [
        Perm.VIEW_CALLS, Perm.VIEW_BODIES, Perm.REPLAY_CALLS, Perm.EXPORT_CALLS, Perm.VIEW_AUDIT,
        Perm.MANAGE_ACCESS,
        # so that an admin who is staff can manage users, groups and tokens in the admin site
        "auth.view_user", "auth.add_user", "auth.change_user", "auth.delete_user",
        "auth.view_group", "auth.change_group",
        "authtoken.view_tokenproxy", "authtoken.add_tokenproxy", "authtoken.delete_tokenproxy",
    ],
}


def ensure_roles(sender: Any = None, **kwargs: Any) -> None:
    """Create the groups and set their permissions exactly to ROLES (post_migrate handler)."""
    from django.contrib.auth.models import Group, Permission

    for role, perms in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for perm in perms:
            app_label, codename = perm.split(".", 1)
            wanted += list(Permission.objects.filter(content_type__app_label=app_label, codename=codename))
        group.permissions.set(wanted)


def requires(perm: str) -> Callable:
    """Django view decorator: login (redirect to the login page), then `perm` (403 without it)."""

    def decorate(view: Callable) -> Callable:
        from django.contrib.auth.decorators import login_required
        from django.http import HttpResponseForbidden

        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.has_perm(perm):
                return HttpResponseForbidden(f"This page needs the {perm} permission.")
            return view(request, *args, **kwargs)

        wrapped.required_permission = perm
        return wrapped

    return decorate
