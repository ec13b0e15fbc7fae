"""The audit trail: who did what, when, and from where, as AuditEvent rows.

`audit(...)` is the one way to write an event (and `readable` the way to read one back out);
`connect_signals()` (called from the app's
ready) records logins, failed logins, logouts, user and role changes and token creation
without the views having to remember. Other actions (exports, replays, bodies downloaded,
configuration loads) call `audit(...)` where they happen. A failure to write an event is
logged and never breaks the action it describes (the action itself already happened).
This module must not read call records.
"""
from __future__ import annotations

import contextvars
import logging
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.utils import timezone
from django.utils.decorators import sync_and_async_middleware

log = logging.getLogger(__name__)

MAX_TEXT = 512


class Action:
    LOGIN = "login"
    LOGIN_FAILED = "login-failed"
    LOGOUT = "logout"
    USER_CREATED = "user-created"
    USER_CHANGED = "user-changed"
    USER_DELETED = "user-deleted"
    ROLE_ADDED = "role-added"
    ROLE_REMOVED = "role-removed"
    TOKEN_CREATED = "token-created"
    TOKEN_DELETED = "token-deleted"
    CONFIG_LOADED = "config-loaded"
    EXPORT = "export"
    AUDIT_EXPORT = "audit-export"
    REPLAY = "replay"
    REPLAY_CANCELLED = "replay-cancelled"
    BODIES_DOWNLOADED = "bodies-downloaded"
    COPY_OUT = "copy-out"
    RECORDS_REDACTED = "records-redacted"
    REPLICA_FORGOTTEN = "replica-forgotten"


TEXTS = ("actor", "action", "target", "source", "detail")  # an event's fields a reader shows as stored


def readable(value: Any) -> Any:
    """An event's text or detail as UTF-8 can carry it, for every reader (the API, the audit
    page): an event stored before texts were made storable (SQLite kept a lone surrogate in a
    detail) has "?" for it, as exports write it, instead of failing the whole answer. One
    encode in the usual case; nothing is written back."""
    import msgspec

    from .recording.bulk import storable

    try:
        msgspec.json.encode(value)
    except UnicodeEncodeError:
        return storable(value)
    return value


def source_of(request: Any) -> str:
    """Where a request came from: the peer address the server saw (proxies' headers are not trusted)."""
    if request is None:
        return ""
    meta = getattr(request, "META", None) or {}
    return str(meta.get("REMOTE_ADDR") or "")[:255]


def _actor_of(request: Any, user: Any) -> str:
    user = user if user is not None else getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return ""
    return str(user.get_username())[:150]


def audit(request: Any = None, action: str = "", target: str = "", detail: dict | None = None, *,
          user: Any = None, actor: str | None = None, source: str | None = None) -> None:
    """Record one event. `request` gives the user and the address; commands pass `source="cli"`."""
    from .models import AuditEvent
    from .recording.bulk import storable, storable_text

    try:
        # Texts as every database and every reader takes them: a request's JSON can hold a lone
        # surrogate ("\ud800"), which SQLite kept and which then broke each export and listing
        # of the trail (UTF-8 cannot encode it); PostgreSQL refuses it and NUL outright.
        AuditEvent.objects.create(
            at=timezone.now(),
            actor=storable_text(actor if actor is not None else _actor_of(request, user)),
            action=storable_text(action),
            target=storable_text(str(target)[:MAX_TEXT]),
            source=storable_text(source if source is not None else source_of(request)),
            detail=storable(detail or {}),
        )
    except Exception:  # the audited action already happened; losing its trace must not undo it
        log.exception("could not write audit event %s %s", action, target)


# --- signals -------------------------------------------------------------------------------

_USER_FIELDS = ("username", "is_active", "is_staff", "is_superuser", "password")


def _on_login(sender, request, user, **kwargs):
    audit(request, Action.LOGIN, target=user.get_username(), user=user)


def _on_login_failed(sender, credentials, request=None, **kwargs):
    username = str(credentials.get("username", ""))  # Django has already masked the password
    audit(request, Action.LOGIN_FAILED, target=username, actor="")


def _on_logout(sender, request, user, **kwargs):
    if user is not None:
        audit(request, Action.LOGOUT, target=user.get_username(), user=user)


def _remember_user(sender, instance, update_fields=None, **kwargs):
    if instance.pk is None or (update_fields is not None and not set(update_fields) & set(_USER_FIELDS)):
        instance._audit_before = None  # new, or only last_login (every login): nothing to compare
        return
    before = sender.objects.filter(pk=instance.pk).values(*_USER_FIELDS).first()
    instance._audit_before = before


def _on_user_saved(sender, instance, created, **kwargs):
    if created:
        audit(None, Action.USER_CREATED, target=instance.get_username(), actor=_current_actor(),
              source=_current_source(), detail={"is_superuser": instance.is_superuser})
        return
    before = getattr(instance, "_audit_before", None) or {}
    changed = sorted(f for f in _USER_FIELDS if f in before and before[f] != getattr(instance, f))
    if changed:
        # The password's value never goes into the trail, only that it changed.
        detail = {f: getattr(instance, f) for f in changed if f != "password"}
        if "password" in changed:
            detail["password"] = "changed"
        audit(None, Action.USER_CHANGED, target=instance.get_username(), actor=_current_actor(),
              source=_current_source(), detail=detail)


def _on_user_deleted(sender, instance, **kwargs):
    audit(None, Action.USER_DELETED, target=instance.get_username(), actor=_current_actor(), source=_current_source())


def _on_groups_changed(sender, instance, action, reverse, model, pk_set, **kwargs):
    from django.contrib.auth.models import Group

    if action not in ("post_add", "post_remove", "pre_clear"):
        return
    if reverse:  # group.user_set.add(user, ...): instance is the group
        users = [u.get_username() for u in model.objects.filter(pk__in=pk_set or [])]
        pairs = [(u, instance.name) for u in users]
    else:
        names = [g.name for g in Group.objects.filter(pk__in=pk_set or [])]
        if action == "pre_clear":
            names = list(instance.groups.values_list("name", flat=True))
        pairs = [(instance.get_username(), n) for n in names]
    kind = Action.ROLE_ADDED if action == "post_add" else Action.ROLE_REMOVED
    for username, role in pairs:
        audit(None, kind, target=username, actor=_current_actor(), source=_current_source(), detail={"role": role})


def _on_token_saved(sender, instance, created, **kwargs):
    if created:
        audit(None, Action.TOKEN_CREATED, target=instance.user.get_username(), actor=_current_actor(),
              source=_current_source())


def _on_token_deleted(sender, instance, **kwargs):
    audit(None, Action.TOKEN_DELETED, target=instance.user.get_username(), actor=_current_actor(),
          source=_current_source())


# Who is acting, for changes made through models (the admin site, commands): the current request
# (set by AuditActorMiddleware, read only when an event is written, so no request pays a query)
# or an (actor, source) pair set by a command with `acting_as`.
_acting: contextvars.ContextVar[Any] = contextvars.ContextVar("audit_acting", default=None)


def _current_actor() -> str:
    acting = _acting.get()
    if isinstance(acting, tuple):
        return acting[0]
    return _actor_of(acting, None) if acting is not None else ""


def _current_source() -> str:
    acting = _acting.get()
    if isinstance(acting, tuple):
        return acting[1]
    return source_of(acting)


class acting_as:
    """Context manager: model changes inside are attributed to `actor` from `source`."""

    def __init__(self, actor: str, source: str = "cli") -> None:
        self.value = (actor, source)

    def __enter__(self) -> "acting_as":
        self.token = _acting.set(self.value)
        return self

    def __exit__(self, *exc: Any) -> None:
        _acting.reset(self.token)


@sync_and_async_middleware
def audit_actor_middleware(get_response):
    """Attributes the model changes a request makes (the admin site) to its user and address."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            token = _acting.set(request)
            try:
                return await get_response(request)
            finally:
                _acting.reset(token)

    else:

        def middleware(request):  # type: ignore[misc]
            token = _acting.set(request)
            try:
                return get_response(request)
            finally:
                _acting.reset(token)

    return middleware


def connect_signals() -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
    from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
    from rest_framework.authtoken.models import Token

    User = get_user_model()
    user_logged_in.connect(_on_login, dispatch_uid="audit-login")
    user_login_failed.connect(_on_login_failed, dispatch_uid="audit-login-failed")
    user_logged_out.connect(_on_logout, dispatch_uid="audit-logout")
    pre_save.connect(_remember_user, sender=User, dispatch_uid="audit-user-before")
    post_save.connect(_on_user_saved, sender=User, dispatch_uid="audit-user-saved")
    post_delete.connect(_on_user_deleted, sender=User, dispatch_uid="audit-user-deleted")
    m2m_changed.connect(_on_groups_changed, sender=User.groups.through, dispatch_uid="audit-groups")
    post_save.connect(_on_token_saved, sender=Token, dispatch_uid="audit-token-saved")
    post_delete.connect(_on_token_deleted, sender=Token, dispatch_uid="audit-token-deleted")
