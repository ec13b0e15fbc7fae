"""The shipped Deployment does not let a client choose the address extproxy sees: uvicorn
believes X-Forwarded-For only from the addresses in FORWARDED_ALLOW_IPS, and "*" made every
client's own header the address the login throttle counts and the audit trail records. A file
check of deploy/deployment.yaml, and a real uvicorn started with that setting: 25 failed
log-ins from one client, each claiming another address, are throttled all the same. And the
Ingress that placeholder does not trust gets a page saying so, not an endless https redirect."""
from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import requests
import uvicorn

from extproxy.ratelog import RateLimitedLog
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


class ServedDjango:
    """Django's own ASGI application, built after the test's settings (its middleware reads them
    once), behind a real uvicorn that believes forwarded headers only from `trusted`."""

    def __init__(self, trusted: str) -> None:
        from django.core.asgi import get_asgi_application

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(get_asgi_application(), host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="off", proxy_headers=True,
                                                    forwarded_allow_ips=trusted))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServedDjango:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(5)

    def get(self, path: str, **headers: str) -> requests.Response:
        return requests.get(f"http://127.0.0.1:{self.port}{path}", allow_redirects=False, timeout=10,
                            headers={"Host": "localhost", **headers})


def test_an_untrusted_proxy_saying_https_gets_the_reason_instead_of_a_redirect_loop(transactional_db, settings):
    RateLimitedLog.forget_all()
    settings.SECURE_SSL_REDIRECT = True
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("extproxy.https").addHandler(handler)
    try:
        with ServedDjango(trusted=forwarded_allow_ips()) as served:
            through_ingress = served.get("/", **{"X-Forwarded-Proto": "https"})
            again = served.get("/", **{"X-Forwarded-Proto": "https"})
            probe = served.get("/healthz", **{"X-Forwarded-Proto": "https"})
            plain = served.get("/")
    finally:
        logging.getLogger("extproxy.https").removeHandler(handler)
    # Redirected to https, the Ingress would send the browser back as it came: for ever.
    assert through_ingress.status_code == 500 and "location" not in through_ingress.headers
    assert "127.0.0.1 is not in FORWARDED_ALLOW_IPS" in through_ingress.text
    assert through_ingress.headers["content-type"].startswith("text/plain")
    assert again.status_code == 500
    assert len(logged) == 1 and "FORWARDED_ALLOW_IPS" in logged[0]  # once a minute, not per request
    assert probe.status_code == 200  # kubelet's probes are exempt from the redirect, and from this
    # A request that says nothing of https is one the redirect serves rightly.
    assert plain.status_code == 301 and plain.headers["location"] == "https://localhost/"


def test_a_trusted_proxy_saying_https_is_believed(transactional_db, settings):
    settings.SECURE_SSL_REDIRECT = True
    with ServedDjango(trusted="127.0.0.1") as served:
        answer = served.get("/", **{"X-Forwarded-Proto": "https"})
        said_http = served.get("/", **{"X-Forwarded-Proto": "http"})
    assert answer.status_code == 302 and answer.headers["location"].startswith("/accounts/login/")
    assert said_http.status_code == 301 and said_http.headers["location"] == "https://localhost/"
