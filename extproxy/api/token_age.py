"""The maximum age of an API token (EXTPROXY_TOKEN_MAX_AGE seconds from its `created`).

Before, a token worked until it was rotated or deleted, or its user deactivated: one copied into
a script years ago still read every call. Now an older one is refused: 401 saying it expired on
the API (ExpiringTokenAuthentication, the first of DRF's authentication classes in settings),
and on the live socket the close code of a bad token (dashboard/auth.py). A login replaces it
(auth.py). Kept apart from auth.py: DRF imports the authentication classes while its views
module loads, which auth.py's view imports in turn.
"""
from __future__ import annotations

import datetime

from django.conf import settings
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed


def ends_at(token: Token) -> datetime.datetime | None:
    """When `token` stops being valid, or None when there is no maximum age."""
    max_age = int(settings.EXTPROXY_TOKEN_MAX_AGE)
    return token.created + datetime.timedelta(seconds=max_age) if max_age > 0 else None


def expired(token: Token) -> str | None:
    """Why `token` is too old to be used, or None while it is valid (or there is no maximum age)."""
    ends = ends_at(token)
    if ends is None or timezone.now() < ends:
        return None
    max_age = int(settings.EXTPROXY_TOKEN_MAX_AGE)
    issued = token.created.astimezone(datetime.timezone.utc)
    return (f"token expired: issued {issued:%Y-%m-%d %H:%M:%S} UTC, older than EXTPROXY_TOKEN_MAX_AGE "
            f"({max_age} s); get a new one: POST /api/auth/token/ with the user's name and password, "
            "or `manage.py token NAME --rotate`")


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, with the maximum age: an expired token is a 401 with the reason
    (and `WWW-Authenticate: Token`), not a request without a user."""

    def authenticate_credentials(self, key):
        user, token = super().authenticate_credentials(key)
        reason = expired(token)
        if reason is not None:
            raise AuthenticationFailed(reason)
        return user, token
