"""The base of the management commands that run as background processes beside the serving one
(`recorder`, `shadow`)."""
from __future__ import annotations

from django.core.management.base import BaseCommand


class BackgroundCommand(BaseCommand):
    # Django's system checks import every URL, view and admin module (the API, the dashboard, the
    # schema generator): half of such a process's start (`manage.py recorder --until-idle` on an
    # empty spool: 1.3 s with them, 0.6 s without), spent again by every restart before it drains
    # anything. These processes serve no URL; the serving process and `migrate` run the checks.
    requires_system_checks: list[str] = []
