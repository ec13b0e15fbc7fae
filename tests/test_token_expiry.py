"""An API token older than EXTPROXY_TOKEN_MAX_AGE stops working (extproxy/api/auth.py).

Before, a token worked until it was rotated or deleted or its user deactivated: one copied into
a script years ago still read every call. A real serving process: a token made older than the
bound (its `created` moved back in the database) is answered 401 saying it expired, the live
socket refuses it with the code of a bad token, and logging in again gives a new one that works."""
from __future__ import annotations

import asyncio
import datetime

import aiohttp
import pytest
import requests
from django.utils import timezone
from rest_framework.authtoken.models import Token

from tests.processes import Installation, _query

CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"
MAX_AGE = 3600


async def live_close_code(url: str, token: str) -> int | None:
    """The close code /ws/live/ answers a socket offering `token` with (None: it stayed open)."""
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url.replace("http", "ws") + "/ws/live/",
                                      protocols=("extproxy", f"extproxy.token.{token}")) as ws:
            message = await ws.receive(timeout=20)
            if message.type == aiohttp.WSMsgType.TEXT:
                return None
            return ws.close_code


def calls(url: str, token: str) -> requests.Response:
    return requests.get(url + "/api/calls/", headers={"Authorization": f"Token {token}"}, timeout=30)


def token_login(url: str) -> str:
    answer = requests.post(url + "/api/auth/token/", data={"username": "admin", "password": "s3cret"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["token"]


def test_an_expired_token_is_refused_and_a_new_login_replaces_it(tmp_path, installation_database):
    installation = Installation(tmp_path, CONFIG, installation_database, EXTPROXY_TOKEN_MAX_AGE=str(MAX_AGE))
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        installation.manage("bootstrap")
        installation.start_serving()
        url = installation.url
        token = token_login(url)
        assert calls(url, token).status_code == 200
        assert asyncio.run(live_close_code(url, token)) is None

        # Issued an hour and a minute ago.
        _query(installation, "UPDATE authtoken_token SET created = created - INTERVAL '3660 seconds' RETURNING key"
               if installation_database else
               "UPDATE authtoken_token SET created = datetime(created, '-3660 seconds') RETURNING key")
        answer = calls(url, token)
        assert answer.status_code == 401, answer.text
        assert "expired" in answer.json()["detail"] and "EXTPROXY_TOKEN_MAX_AGE" in answer.json()["detail"]
        assert answer.headers["WWW-Authenticate"].startswith("Token")
        bad_token = asyncio.run(live_close_code(url, "0" * 40))
        assert bad_token == 4401
        assert asyncio.run(live_close_code(url, token)) == bad_token

        renewed = token_login(url)
        assert renewed != token
        assert calls(url, renewed).status_code == 200
        assert calls(url, token).status_code == 401
        assert asyncio.run(live_close_code(url, renewed)) is None
    finally:
        installation.close()


@pytest.mark.django_db
def test_no_maximum_age_when_it_is_0(client, settings, django_user_model):
    settings.EXTPROXY_TOKEN_MAX_AGE = 0
    user = django_user_model.objects.create_superuser("old-script", "", "pw")
    token = Token.objects.create(user=user)
    Token.objects.filter(pk=token.pk).update(created=timezone.now() - datetime.timedelta(days=3650))
    assert client.get("/api/calls/", HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 200
    settings.EXTPROXY_TOKEN_MAX_AGE = MAX_AGE
    answer = client.get("/api/calls/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert answer.status_code == 401 and "expired" in answer.json()["detail"]


def test_manage_py_token_replaces_an_expired_token_rather_than_print_it(django_user_model, settings):
    """`manage.py token NAME` printed the user's token even when it had expired: a script given it
    got 401s. It now makes a new one, and says why on stderr."""
    import io

    from django.core.management import call_command

    settings.EXTPROXY_TOKEN_MAX_AGE = MAX_AGE
    user = django_user_model.objects.create_user("ci-script", password="pw")
    old = Token.objects.create(user=user)
    assert _token_command("ci-script") == old.key  # still valid: printed as it is
    Token.objects.filter(pk=old.pk).update(created=timezone.now() - datetime.timedelta(seconds=MAX_AGE + 60))
    err = io.StringIO()
    out = io.StringIO()
    call_command("token", "ci-script", stdout=out, stderr=err)
    new = out.getvalue().strip()
    assert new != old.key and Token.objects.get(user=user).key == new
    assert "expired" in err.getvalue()


def _token_command(name: str) -> str:
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command("token", name, stdout=out)
    return out.getvalue().strip()
