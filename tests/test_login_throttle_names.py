"""The per-user failed log-in count holds whichever spelling of the name is tried: Django's
login form reads a name NFKC-normalised ("ａｄｍｉｎ" logs in as admin), so the count must be
kept under the same name, or look-alike spellings guess on without limit."""
from __future__ import annotations

import pytest
from django.test import Client

from tests.test_secure_defaults import fresh_throttles  # noqa: F401  (a fixture)

SPELLINGS = ["ａｄｍｉｎ", "ADMIN", "ａｄｍｉｎ ", "Ａdmin", "admin"]


@pytest.mark.django_db
def test_look_alike_names_fill_the_same_users_count(django_user_model, fresh_throttles):  # noqa: F811
    django_user_model.objects.create_superuser("admin", "", "right")
    assert Client(REMOTE_ADDR="10.0.9.1").post("/accounts/login/", {"username": "ａｄｍｉｎ", "password": "right"}).status_code == 302

    for i, name in enumerate(SPELLINGS):  # each from its own address: only the name's count can fill
        answered = Client(REMOTE_ADDR=f"10.0.0.{i}").post("/accounts/login/", {"username": name, "password": "wrong"})
        assert answered.status_code == 200

    for name in ("admin", "ａｄｍｉｎ"):
        refused = Client(REMOTE_ADDR="10.0.1.1").post("/accounts/login/", {"username": name, "password": "right"})
        assert refused.status_code == 429
