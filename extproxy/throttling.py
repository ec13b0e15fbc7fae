"""Failed log-in throttling for the login form, the admin's login and POST /api/auth/token/.

Failures are counted (through Django's user_login_failed signal, which every authenticate()
sends) per client address and per user name in the cache (shared by the replicas
when Redis is configured) over EXTPROXY_LOGIN_WINDOW seconds; once either count reaches
EXTPROXY_LOGIN_FAILURES, every attempt for that address or name is answered 429 with
Retry-After until the window ends, correct passwords included (otherwise guessing would go on
until it succeeds). Successful log-ins are never counted. The token endpoint also has a plain
DRF rate (`auth-token` scope) that bounds the password hashing an anonymous client can cause.
This module must not log passwords or tokens.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from functools import wraps
from typing import Callable

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from rest_framework.throttling import BaseThrottle, ScopedRateThrottle

from .throttle_store import store

_PREFIX = "extproxy:login-failures:"


def _keys(request: HttpRequest, username: str) -> list[str]:
    address = request.META.get("REMOTE_ADDR") or "unknown"
    # As the login form reads it (NFKC: "ａｄｍｉｎ" logs in as admin), then case-folded: every
    # spelling of one account's name fills one count.
    folded = AbstractBaseUser.normalize_username(username).strip().casefold()
    name = hashlib.sha256(folded.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return [f"{_PREFIX}addr:{address}", f"{_PREFIX}user:{name}"]


def retry_after(request: HttpRequest, username: str) -> int | None:
    """Seconds until attempts are accepted again, or None when they are accepted now."""
    limit = settings.EXTPROXY_LOGIN_FAILURES
    for started, count in store.get_many(_keys(request, username)).values():
        if count >= limit:
            return max(1, int(started + settings.EXTPROXY_LOGIN_WINDOW - time.time()))
    return None


def record_failure(request: HttpRequest, username: str) -> None:
    window = settings.EXTPROXY_LOGIN_WINDOW
    now = time.time()
    for key in _keys(request, username):
        started, count = store.get(key) or (now, 0)
        # The window runs from the first failure; the entry expires with it.
        store.set(key, (started, count + 1), timeout=max(1, int(started + window - now)))


def too_many(seconds: int) -> HttpResponse:
    response = HttpResponse(
        f"Too many failed log-ins from this address or for this user; try again in {seconds} s.\n",
        status=429, content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(seconds)
    return response


class FailedLoginThrottle(BaseThrottle):
    """DRF side of the same counts: refuses while the address or name is over the limit."""

    def allow_request(self, request, view) -> bool:
        data = request.data if isinstance(request.data, Mapping) else {}  # a JSON list is a bad request, not a crash
        self._wait = retry_after(request, str(data.get("username", "")))
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait


@receiver(user_login_failed, dispatch_uid="extproxy-throttling")
def count_failed_login(sender, credentials, request=None, **kwargs) -> None:
    """Every failed authenticate() with a request (form, admin, token endpoint) is counted."""
    if request is not None:
        record_failure(request, str(credentials.get("username", "")))


def throttle_logins(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a Django login view: a POST while over the limit is answered 429 unread."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method == "POST":
            wait = retry_after(request, request.POST.get("username", ""))
            if wait is not None:
                return too_many(wait)
        return view(request, *args, **kwargs)

    return wrapped


class TokenRateThrottle(ScopedRateThrottle):
    """DRF's scoped rate, its history kept where the failed-login counts are (throttle_store)."""

    cache = store


# The token endpoint's throttles (api/auth.py): the failed-login counts, and a plain rate.
TOKEN_THROTTLES = [TokenRateThrottle, FailedLoginThrottle]
TOKEN_THROTTLE_SCOPE = "auth-token"


