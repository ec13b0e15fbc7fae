"""API permission checks: one class per permission (roles.py says which role holds which).

`needs(perm)` is what every API view declares in `permission_classes`; the default (settings)
is `needs(Perm.VIEW_CALLS)`. Unauthenticated requests get 401 with `WWW-Authenticate`
(TokenAuthentication comes first in the settings), authenticated ones without the permission
403 naming it. Must not decide anything from group names.
"""
from __future__ import annotations

from functools import lru_cache

from rest_framework.permissions import BasePermission

from ..roles import Perm


class _NeedsPermission(BasePermission):
    required_permission = ""

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.has_perm(self.required_permission))


@lru_cache(maxsize=None)
def needs(perm: str) -> type[BasePermission]:
    """A DRF permission class that lets through users holding `perm`."""
    codename = perm.split(".", 1)[-1]
    return type(
        f"Needs_{codename}",
        (_NeedsPermission,),
        {"required_permission": perm, "message": f"This needs the {perm} permission."},
    )


class _NeedsOneOf(BasePermission):
    """Lets through users holding any of `permissions`: a view that then checks, per object,
    the one that object needs (an export's manifest: its kind's permission)."""

    permissions: tuple[str, ...] = ()

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and any(user.has_perm(p) for p in self.permissions))


@lru_cache(maxsize=None)
def needs_one_of(*perms: str) -> type[BasePermission]:
    """A DRF permission class that lets through users holding at least one of `perms`."""
    return type(
        "Needs_" + "_or_".join(p.split(".", 1)[-1] for p in perms),
        (_NeedsOneOf,),
        {"permissions": perms, "required_permission": " or ".join(perms),
         "message": f"This needs one of the permissions {', '.join(perms)}."},
    )


CanViewCalls = needs(Perm.VIEW_CALLS)
