"""The shipped Deployment does not let a client choose the address extproxy sees: uvicorn
believes X-Forwarded-For only from the addresses in FORWARDED_ALLOW_IPS, and "*" made every
client's own header the address the login throttle counts and the audit trail records. A file
check of deploy/deployment.yaml, and a real uvicorn started with that setting: 25 failed
log-ins from one client, each claiming another address, are throttled all the same."""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import requests
import uvicorn

from tests.conftest import free_port

DEPLOYMENT = Path(__file__).resolve().parent.parent / "deploy" / "deployment.yaml"


def forwarded_allow_ips() -> str:
    found = re.findall(r'name: FORWARDED_ALLOW_IPS, value: "([^"]*)"', DEPLOYMENT.read_text())
    assert len(found) == 1, "deploy/deployment.yaml sets FORWARDED_ALLOW_IPS once"
    return found[0]


def test_the_deployment_trusts_no_client_to_say_its_own_address():
    allowed = [part.strip() for part in forwarded_allow_ips().split(",")]
    assert "*" not in allowed and "0.0.0.0/0" not in allowed and "::/0" not in allowed


def test_a_client_claiming_other_addresses_is_throttled_all_the_same(transactional_db, settings):
    import uuid

    from extproxy.asgi import application

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": uuid.uuid4().hex}}
    settings.EXTPROXY_LOGIN_FAILURES = 5
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                                           proxy_headers=True, forwarded_allow_ips=forwarded_allow_ips()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        statuses = []
        for i in range(8):
            session = requests.Session()
            session.get(f"http://127.0.0.1:{port}/accounts/login/", headers={"Host": "localhost"}, timeout=10)
            statuses.append(session.post(
                f"http://127.0.0.1:{port}/accounts/login/", allow_redirects=False, timeout=10,
                data={"username": f"user{i}", "password": "guess", "csrfmiddlewaretoken": session.cookies["csrftoken"]},
                headers={"Host": "localhost", "X-Forwarded-For": f"203.0.113.{i}"}).status_code)
    finally:
        server.should_exit = True
        thread.join(5)
    assert statuses[:5] == [200] * 5 and set(statuses[5:]) == {429}
