"""Closing live sockets whose user lost access since they connected.

The live consumer checks its user once, at connect; a socket stays open for hours. Each
consumer also joins its user's own group (`user_group`), and a change that can take access
away sends that group a `live.recheck` message: a logout (with the session it ended), a token
deleted (with its key), a user saved (deactivated, superuser taken away) or deleted, a role or
permission removed from a user or a group. The consumer closes when the message names its own
session or token, else reads its user afresh and closes unless still active and allowed
(4401 not logged in, 4403 no role). A group or a permission deleted tells every user who held
it: the rows that gave them access (memberships, a group's or user's permissions) are deleted
with it, and deleting those rows sends no m2m signal, so they are read before they go
(pre_delete). Nothing runs per message of the stream: the cost is one query per open socket of
the user, at the change.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete

logger = logging.getLogger(__name__)


def user_group(pk: Any) -> str:
    return f"live.user.{pk}"


def tell(pks: Iterable[Any], **fields: str) -> None:
    """Sends each user's sockets a recheck once the change is committed; never fails the change
    that caused it. After the commit: a socket rechecking before it (another thread, process or
    replica) would read the access as it was and stay open. The users are found now: a
    `pre_clear`'s rows are gone by then."""
    users = set(pks)
    transaction.on_commit(lambda: _send(users, fields))


def _send(pks: set[Any], fields: dict[str, str]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for pk in pks:
        message = {"type": "live.recheck", **fields}
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a request's thread: no loop of its own
            try:
                async_to_sync(layer.group_send)(user_group(pk), message)
            except Exception:  # a channel layer away (Redis down) must not fail a logout
                logger.warning("could not tell user %s's live sockets to recheck their access", pk, exc_info=True)
        else:
            asyncio.ensure_future(layer.group_send(user_group(pk), message))


def _logged_out(sender, request, user, **kwargs) -> None:
    if user is not None:
        session = getattr(request, "session", None)
        tell([user.pk], session=(session.session_key or "") if session is not None else "")


def _user_saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    # Not a login's own save of last_login (every login): it takes no access away.
    if not created and set(update_fields or ()) != {"last_login"}:
        tell([instance.pk])


def _user_deleted(sender, instance, **kwargs) -> None:
    tell([instance.pk])


def _token_deleted(sender, instance, **kwargs) -> None:
    tell([instance.user_id], token=instance.key)


def _users_of_groups(groups: Iterable[Any]) -> list[Any]:
    return list(get_user_model().objects.filter(groups__in=list(groups)).values_list("pk", flat=True))


def _user_access_changed(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    # Removals only: what is added gives access, and the socket already has it.
    if action == "post_remove" or action == "pre_clear":
        if not reverse:
            tell([instance.pk])
        elif action == "post_remove":
            tell(pk_set or ())
        elif isinstance(instance, Group):
            tell(instance.user_set.values_list("pk", flat=True))
        else:  # a Permission cleared from its users
            tell(instance.user_set.values_list("pk", flat=True))


def _group_permissions_changed(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    if action == "post_remove" or action == "pre_clear":
        if not reverse:
            tell(_users_of_groups([instance.pk]))
        elif action == "post_remove":
            tell(_users_of_groups(pk_set or ()))
        else:  # a Permission cleared from every group
            tell(_users_of_groups(instance.group_set.values_list("pk", flat=True)))


def _group_deleted(sender, instance, **kwargs) -> None:
    # Its members: their memberships are deleted with it, without an m2m signal.
    tell(instance.user_set.values_list("pk", flat=True))


def _permission_deleted(sender, instance, **kwargs) -> None:
    # Whoever held it, directly or through a group (a content type deleted takes its
    # permissions with it: each is deleted with this signal too).
    groups = instance.group_set.values_list("pk", flat=True)
    tell([*instance.user_set.values_list("pk", flat=True), *_users_of_groups(groups)])


def connect() -> None:
    """Connects the receivers (DashboardConfig.ready: the models are loaded by then)."""
    from rest_framework.authtoken.models import Token

    user = get_user_model()
    user_logged_out.connect(_logged_out, dispatch_uid="live-logged-out")
    post_save.connect(_user_saved, sender=user, dispatch_uid="live-user-saved")
    post_delete.connect(_user_deleted, sender=user, dispatch_uid="live-user-deleted")
    post_delete.connect(_token_deleted, sender=Token, dispatch_uid="live-token-deleted")
    m2m_changed.connect(_user_access_changed, sender=user.groups.through, dispatch_uid="live-user-groups")
    m2m_changed.connect(_user_access_changed, sender=user.user_permissions.through, dispatch_uid="live-user-perms")
    m2m_changed.connect(_group_permissions_changed, sender=Group.permissions.through, dispatch_uid="live-group-perms")
    pre_delete.connect(_group_deleted, sender=Group, dispatch_uid="live-group-deleted")
    pre_delete.connect(_permission_deleted, sender=Permission, dispatch_uid="live-permission-deleted")
