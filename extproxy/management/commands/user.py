"""`manage.py user`: add users with a role, change their roles, list and deactivate them.

    manage.py user add NAME --role auditor [--password-stdin]   (else a random password, printed once)
    manage.py user role NAME --role developer [--role auditor]  (sets exactly these roles)
    manage.py user deactivate NAME
    manage.py user list

Every change is in the audit trail, attributed to the operating-system user and "cli".
"""
from __future__ import annotations

import getpass
import secrets
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from extproxy.audit import acting_as
from extproxy.roles import ROLES


def _cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no user name in this environment (some containers)
        return "cli"


class Command(BaseCommand):
    help = "Add users with a role, change their roles, list or deactivate them."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="create a user")
        add.add_argument("name")
        add.add_argument("--role", action="append", choices=sorted(ROLES), required=True)
        add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
        role = sub.add_parser("role", help="set a user's roles")
        role.add_argument("name")
        role.add_argument("--role", action="append", choices=sorted(ROLES), required=True)
        off = sub.add_parser("deactivate", help="stop a user from logging in (tokens stop working too)")
        off.add_argument("name")
        sub.add_parser("list", help="users and their roles")

    def handle(self, *args, action: str, **options):
        with acting_as(_cli_actor(), "cli"):
            getattr(self, f"do_{action}")(**options)

    def _user(self, name: str):
        user = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise CommandError(f"no user {name!r}")
        return user

    @transaction.atomic
    def do_add(self, name: str, role: list[str], password_stdin: bool, **_):
        User = get_user_model()
        if User.objects.filter(username=name).exists():
            raise CommandError(f"user {name!r} exists; use `user role {name} --role ...` to change roles")
        password = sys.stdin.readline().rstrip("\n") if password_stdin else secrets.token_urlsafe(18)
        if not password:
            raise CommandError("empty password on stdin")
        user = User.objects.create_user(name, password=password, is_staff="admin" in role)
        user.groups.set(Group.objects.filter(name__in=role))
        shown = "" if password_stdin else f" with password {password} (shown once)"
        self.stdout.write(f"created user {name} ({', '.join(sorted(role))}){shown}")

    @transaction.atomic
    def do_role(self, name: str, role: list[str], **_):
        user = self._user(name)
        user.groups.set(Group.objects.filter(name__in=role))
        staff = "admin" in role or user.is_superuser  # the admin site is where admins manage users and tokens
        if user.is_staff != staff:
            user.is_staff = staff
            user.save()
        self.stdout.write(f"{name}: {', '.join(sorted(role))}")

    def do_deactivate(self, name: str, **_):
        user = self._user(name)
        user.is_active = False
        user.save()
        self.stdout.write(f"{name}: deactivated")

    def do_list(self, **_):
        for user in get_user_model().objects.order_by("username").prefetch_related("groups"):
            roles = ", ".join(sorted(g.name for g in user.groups.all())) or "-"
            flags = ("superuser " if user.is_superuser else "") + ("" if user.is_active else "inactive")
            self.stdout.write(f"{user.username}\t{roles}\t{flags.strip()}")
