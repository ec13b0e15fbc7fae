"""`manage.py token NAME`: print NAME's API token, creating it if needed (`--rotate`: a new one).
An expired one (EXTPROXY_TOKEN_MAX_AGE) is replaced too, and stderr says so: printed as it was,
a script given it met only 401s.

Scripts send it as `Authorization: Token <token>`. Creation is in the audit trail.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from rest_framework.authtoken.models import Token

from extproxy.api.token_age import expired
from extproxy.audit import acting_as

from .user import _cli_actor


class Command(BaseCommand):
    help = "Print a user's API token, creating it when missing (--rotate replaces it)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--rotate", action="store_true", help="delete the current token and make a new one")

    @transaction.atomic
    def handle(self, *args, name: str, rotate: bool, **options):
        user = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise CommandError(f"no user {name!r}")
        if not user.is_active:
            raise CommandError(f"user {name!r} is deactivated")
        with acting_as(_cli_actor(), "cli"):
            current = Token.objects.filter(user=user).first()
            reason = expired(current) if current is not None else None
            if reason is not None:
                self.stderr.write(f"the token of {name} has expired (EXTPROXY_TOKEN_MAX_AGE): a new one replaces it")
            if rotate or reason is not None:
                Token.objects.filter(user=user).delete()
            token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
