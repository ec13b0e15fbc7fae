"""Per-role permissions. Roles are groups (operators, developers, auditors; see the
migration that creates them); every role may read calls, and later actions (replay, export)
check their own permission."""
from rest_framework.permissions import BasePermission


class CanViewCalls(BasePermission):
    message = "Reading calls needs the extproxy.view_call permission (any extproxy role)."

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.has_perm("extproxy.view_call"))
