"""With Redis away, operators could not log in: the failed-login counts live in the Redis cache
(shared by the replicas), and reading them raised, so the login form and POST /api/auth/token/
answered 500 "Server Error" on every replica while the database, the dashboard and the extender
were fine. A real serving process whose Redis is behind a relay that then stops answering (a
hung Redis) or refuses connections (a dead one): log-ins work, and the counting goes on in the
process (wrong passwords still end in 429), so an outage opens no door to guessing."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

import pytest
import requests

from tests.processes import Installation
from tests.tcprelay import FreezableRelay

CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"


@contextmanager
def serving_behind_redis_relay(tmp_path, redis_url: str, **env: str) -> Iterator[tuple[FreezableRelay, Installation]]:
    """A migrated installation's serving process whose Redis (cache and channel layer) is reached
    through a relay the test can make hang or refuse; closed after."""
    target = urlparse(redis_url)
    relay = FreezableRelay(target.hostname or "127.0.0.1", target.port or 6379)
    installation = Installation(tmp_path, CONFIG, EXTPROXY_REDIS_URL=f"redis://127.0.0.1:{relay.port}{target.path}",
                                EXTPROXY_CACHE_PREFIX=f"redis-away-{tmp_path.name}", **env)
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        installation.manage("bootstrap")
        installation.start_serving()
        yield relay, installation
    finally:
        installation.close()
        relay.close()


def login_form(url: str, password: str) -> int:
    session = requests.Session()
    session.get(url + "/accounts/login/", timeout=30)
    return session.post(url + "/accounts/login/", allow_redirects=False, timeout=30,
                        data={"username": "admin", "password": password,
                              "csrfmiddlewaretoken": session.cookies["csrftoken"]}).status_code


@pytest.mark.parametrize("outage", ["hung", "refusing"])
def test_operators_log_in_while_redis_is_away_and_guessing_is_still_throttled(tmp_path, redis_url, outage):
    with serving_behind_redis_relay(tmp_path, redis_url, EXTPROXY_LOGIN_FAILURES="3") as (relay, installation):
        assert login_form(installation.url, "s3cret") == 302  # Redis there: as always
        if outage == "hung":
            relay.swallow()
        else:
            relay.close()

        token = requests.post(installation.url + "/api/auth/token/", data={"username": "admin", "password": "s3cret"},
                              timeout=30)
        assert token.status_code == 200, token.text[:300]
        assert requests.get(installation.url + "/api/calls/", headers={"Authorization": f"Token {token.json()['token']}"},
                            timeout=30).status_code == 200
        assert login_form(installation.url, "s3cret") == 302
        assert [login_form(installation.url, "wrong") for _ in range(4)] == [200, 200, 200, 429]
