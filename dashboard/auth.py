"""Websocket authentication by API token (`?token=<key>`), beside the session cookie."""
from __future__ import annotations

from urllib.parse import parse_qs

from channels.db import database_sync_to_async


@database_sync_to_async
def _user_for_token(key: str):
    from rest_framework.authtoken.models import Token

    try:
        return Token.objects.select_related("user").get(key=key).user
    except Token.DoesNotExist:
        return None


class TokenAuthMiddleware:
    """Sets scope["user"] from ?token= when the session gave no authenticated user."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            token = parse_qs(scope.get("query_string", b"").decode()).get("token", [""])[0]
            if token:
                found = await _user_for_token(token)
                if found is not None and found.is_active:
                    scope = dict(scope, user=found)
        return await self.inner(scope, receive, send)
