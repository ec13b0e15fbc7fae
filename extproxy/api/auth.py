"""API tokens: `POST /api/auth/token/` (a script's login) and their maximum age.

The login answers the user's token; both the login and a token's creation go into the audit
trail (failed attempts arrive through Django's user_login_failed signal).

A token older than EXTPROXY_TOKEN_MAX_AGE is refused (token_age.py). A login with the
password replaces an expired token with a new one; a valid one is answered as it is, so that
scripts of one user sharing it keep working.
"""
from __future__ import annotations

from django.db import transaction
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from ..audit import Action, acting_as, audit, source_of
from ..throttling import TOKEN_THROTTLE_SCOPE, TOKEN_THROTTLES
from .parsers import BoundedJSONParser
from .token_age import expired


class TokenLogin(ObtainAuthToken):
    throttle_classes = TOKEN_THROTTLES  # 429 after too many failed log-ins, and a rate per address
    throttle_scope = TOKEN_THROTTLE_SCOPE
    # ObtainAuthToken's own parsers, but JSON nested too deeply is a 400 (parsers.py).
    parser_classes = (FormParser, MultiPartParser, BoundedJSONParser)

    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = serializer.validated_data["user"]
        with acting_as(user.get_username(), source_of(request)), transaction.atomic():
            token = Token.objects.select_for_update().filter(user=user).first()
            if token is not None and expired(token):
                token.delete()  # in the audit trail; live sockets that used it are closed
                token = None
            if token is None:
                token, _ = Token.objects.get_or_create(user=user)
        audit(request, Action.LOGIN, target=user.get_username(), user=user, detail={"via": "token"})
        return Response({"token": token.key})


token_login = TokenLogin.as_view()
