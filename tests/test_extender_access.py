"""The extender endpoints protected: a separate port apart from the dashboard and API, a
source allowlist, and TLS with client certificates (a request without one is refused).

Real servers: extproxy in a thread (uvicorn, with its lifespan starting the extender port),
certificates made by openssl for the test (a CA, the server, a client, and a stranger)."""
from __future__ import annotations

import ssl
import subprocess

import pytest
import requests

from extproxy.extender_access import (
    AccessConfigError,
    Allowlist,
    certificate_names,
    parse_client_names,
    parse_networks,
    server_ssl_context,
)
from tests.conftest import fixture_bytes, free_port, pass_all
from tests.test_per_backend import config_for

NAMES = "filter-request.nodecache-true.json"


@pytest.mark.parametrize(
    "allow, host, allowed",
    [
        ("127.0.0.0/8,::1/128", "127.0.0.1", True),
        ("127.0.0.0/8,::1/128", "::1", True),
        ("127.0.0.0/8,::1/128", "10.1.2.3", False),
        ("10.0.0.0/8", "10.1.2.3", True),
        ("10.0.0.0/8", "::ffff:10.1.2.3", True),  # IPv4 seen through an IPv6 socket
        ("10.0.0.5", "10.0.0.5", True),
        ("10.0.0.5", "10.0.0.6", False),
        ("*", "203.0.113.9", True),
        ("", "127.0.0.1", False),  # an empty list admits nobody
        ("10.0.0.0/8", "not-an-address", False),
    ],
)
def test_it_admits_exactly_the_listed_sources(allow, host, allowed):
    assert Allowlist(parse_networks(allow)).allows_host(host) is allowed
    assert Allowlist(parse_networks(allow)).allows_peer((host, 5555)) is allowed


def test_it_refuses_a_bad_allowlist_with_the_entry():
    with pytest.raises(AccessConfigError, match=r"EXTPROXY_EXTENDER_ALLOW: '10\.0\.0\.0/33'"):
        parse_networks("127.0.0.1, 10.0.0.0/33")


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA; the extender port's certificate (for 127.0.0.1); a client certificate from the CA
    (what kube-scheduler presents); another client of the same CA (a kubelet); and a client
    certificate from another CA."""
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={ca}",
                "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.crt"))
    for name, ca, san in (("server", "ca", "IP:127.0.0.1"), ("scheduler", "ca", "DNS:kube-scheduler"),
                          ("stranger", "other-ca", "DNS:stranger"), ("kubelet", "ca", "DNS:node-1")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(d / f"{name}.key"),
                "-out", str(d / f"{name}.csr"))
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.crt"), "-CAkey",
                str(d / f"{ca}.key"), "-CAcreateserial", "-days", "1", "-extfile", str(d / f"{name}.ext"),
                "-out", str(d / f"{name}.crt"))
    return d


@pytest.fixture
def extender_port(settings):
    """Turn the separate extender port on for the proxy a test starts."""
    def configure(**extra):
        settings.EXTPROXY_EXTENDER_PORT = free_port()
        settings.EXTPROXY_EXTENDER_HOST = "127.0.0.1"
        for key, value in extra.items():
            setattr(settings, key, value)
        from extproxy import extender_access

        extender_access.allowlist.cache_clear()
        return settings.EXTPROXY_EXTENDER_PORT

    yield configure
    from extproxy import extender_access

    extender_access.allowlist.cache_clear()


def test_it_serves_the_extender_only_on_its_own_port(backend_server, proxy, write_config, extender_port, admin_client):
    backend = backend_server({"filter": pass_all})
    port = extender_port()
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    extender = f"http://127.0.0.1:{port}"

    on_main = requests.post(server.url + "/extender/gpu/filter", data=fixture_bytes(NAMES), timeout=10)
    on_own = requests.post(extender + "/extender/gpu/filter", data=fixture_bytes(NAMES), timeout=10)
    ui_on_extender_port = requests.get(extender + "/api/calls/", timeout=10)

    assert on_main.status_code == 404 and str(port) in on_main.json()["error"]
    assert on_own.status_code == 200 and len(on_own.json()["NodeNames"]) == 5
    assert ui_on_extender_port.status_code == 404
    assert admin_client.get(server.url + "/api/calls/").status_code == 200  # the UI stays on the main port
    server.flush()
    assert len(admin_client.get(server.url + "/api/calls/").json()["results"]) == 1  # served calls are recorded


def test_it_refuses_sources_outside_the_allowlist(backend_server, proxy, write_config, extender_port):
    backend = backend_server({"filter": pass_all})
    port = extender_port(EXTPROXY_EXTENDER_ALLOW="10.0.0.0/8")
    proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    # The listener closes a connection from outside the list before reading a byte of it.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(f"http://127.0.0.1:{port}/extender/gpu/filter", data=fixture_bytes(NAMES), timeout=10)
    assert backend.received == []


def test_it_applies_the_allowlist_on_the_main_port_too(backend_server, proxy, write_config, settings):
    from extproxy import extender_access

    settings.EXTPROXY_EXTENDER_ALLOW = "192.0.2.0/24"
    extender_access.allowlist.cache_clear()
    try:
        backend = backend_server({"filter": pass_all})
        server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
        refused = requests.post(server.url + "/extender/gpu/filter", data=fixture_bytes(NAMES), timeout=10)
        ui = requests.get(server.url + "/healthz", timeout=10)
    finally:
        extender_access.allowlist.cache_clear()
    assert refused.status_code == 403 and backend.received == []
    assert ui.status_code == 200  # the allowlist is the extender endpoints', not the dashboard's


def test_it_requires_a_client_certificate_from_the_ca(backend_server, proxy, write_config, extender_port, pki):
    backend = backend_server({"filter": pass_all})
    port = extender_port(EXTPROXY_EXTENDER_TLS_CERT=str(pki / "server.crt"), EXTPROXY_EXTENDER_TLS_KEY=str(pki / "server.key"),
                         EXTPROXY_EXTENDER_TLS_CLIENT_CA=str(pki / "ca.crt"))
    proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    url = f"https://127.0.0.1:{port}/extender/gpu/filter"

    def call(cert: str | None):
        return requests.post(url, data=fixture_bytes(NAMES), timeout=10, verify=str(pki / "ca.crt"),
                             cert=(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key")) if cert else None)

    assert call("scheduler").status_code == 200  # what kube-scheduler's tlsConfig presents
    for cert in (None, "stranger"):
        with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
            call(cert)
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        requests.post(f"http://127.0.0.1:{port}/extender/gpu/filter", data=fixture_bytes(NAMES), timeout=10)
    assert len(backend.received) == 1  # only the call with the right certificate reached the backend


def test_it_admits_only_the_named_clients_of_the_ca(backend_server, proxy, write_config, extender_port, pki):
    """A cluster's CA signs every kubelet's certificate too: with names set, only a certificate
    carrying one of them (CN or subjectAltName) reaches a backend."""
    from extproxy import extender_access, metrics

    extender_access.client_names.cache_clear()
    backend = backend_server({"filter": pass_all})
    port = extender_port(EXTPROXY_EXTENDER_TLS_CERT=str(pki / "server.crt"), EXTPROXY_EXTENDER_TLS_KEY=str(pki / "server.key"),
                         EXTPROXY_EXTENDER_TLS_CLIENT_CA=str(pki / "ca.crt"),
                         EXTPROXY_EXTENDER_TLS_CLIENT_NAMES="system:kube-scheduler, kube-scheduler")
    refused_before = metrics.REJECTED.labels("client-name")._value.get()
    try:
        proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

        def call(cert: str):
            return requests.post(f"https://127.0.0.1:{port}/extender/gpu/filter", data=fixture_bytes(NAMES),
                                 timeout=10, verify=str(pki / "ca.crt"),
                                 cert=(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key")))

        assert call("scheduler").status_code == 200  # its subjectAltName is listed
        with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
            call("kubelet")  # signed by the same CA, named otherwise
    finally:
        extender_access.client_names.cache_clear()
    assert len(backend.received) == 1
    assert metrics.REJECTED.labels("client-name")._value.get() == refused_before + 1


def test_it_reads_the_names_a_certificate_carries():
    peercert = {"subject": ((("organizationName", "system:masters"),), (("commonName", "system:kube-scheduler"),)),
                "subjectAltName": (("DNS", "kube-scheduler"), ("IP Address", "10.0.0.5"), ("email", "x@example.com"))}
    assert certificate_names(peercert) == {"system:kube-scheduler", "kube-scheduler", "10.0.0.5"}
    assert certificate_names(None) == set()
    with pytest.raises(AccessConfigError, match="needs EXTPROXY_EXTENDER_TLS_CLIENT_CA"):
        parse_client_names("kube-scheduler", "")
    assert parse_client_names(" , ", "") is None


def test_it_builds_the_tls_context_or_says_what_is_missing(pki):
    assert server_ssl_context("", "") is None
    context = server_ssl_context(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(AccessConfigError, match="go together"):
        server_ssl_context(str(pki / "server.crt"), "")
    with pytest.raises(AccessConfigError, match="needs"):
        server_ssl_context("", "", str(pki / "ca.crt"))
    with pytest.raises(AccessConfigError, match="extender TLS"):
        server_ssl_context(str(pki / "missing.crt"), str(pki / "server.key"))


@pytest.mark.parametrize(
    "env, message",
    [
        ({"EXTPROXY_EXTENDER_ALLOW": "10.0.0.0/33"}, "EXTPROXY_EXTENDER_ALLOW: '10.0.0.0/33'"),
        ({"EXTPROXY_EXTENDER_TLS_CERT": "/nonexistent.crt", "EXTPROXY_EXTENDER_TLS_KEY": "/nonexistent.key"}, "extender TLS"),
        ({"EXTPROXY_EXTENDER_TLS_CLIENT_NAMES": "kube-scheduler"}, "needs EXTPROXY_EXTENDER_TLS_CLIENT_CA"),
    ],
)
def test_it_refuses_to_start_with_a_bad_protection_setting(env, message):
    import os
    import sys
    from pathlib import Path

    environment = {k: v for k, v in os.environ.items() if k != "EXTPROXY_SKIP_CONFIG_CHECK"}
    environment.update(env)
    result = subprocess.run([sys.executable, "-c", "import extproxy.asgi"], cwd=Path(__file__).parent.parent,
                            env=environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
