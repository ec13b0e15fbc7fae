"""`POST /api/auth/token/`: a script's login. Answers the user's token; both the login and a
first token's creation go into the audit trail (failed attempts arrive through Django's
user_login_failed signal)."""
from __future__ import annotations

from rest_framework.authtoken.models import Token
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.response import Response

from ..audit import Action, acting_as, audit, source_of
from ..throttling import TOKEN_THROTTLE_SCOPE, TOKEN_THROTTLES
from .parsers import BoundedJSONParser


class TokenLogin(ObtainAuthToken):
    throttle_classes = TOKEN_THROTTLES  # 429 after too many failed log-ins, and a rate per address
    throttle_scope = TOKEN_THROTTLE_SCOPE
    # ObtainAuthToken's own parsers, but JSON nested too deeply is a 400 (parsers.py).
    parser_classes = (FormParser, MultiPartParser, BoundedJSONParser)

    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = serializer.validated_data["user"]
        with acting_as(user.get_username(), source_of(request)):
            token, _ = Token.objects.get_or_create(user=user)
        audit(request, Action.LOGIN, target=user.get_username(), user=user, detail={"via": "token"})
        return Response({"token": token.key})


token_login = TokenLogin.as_view()
