"""HTTPS backends, as the scheduler's client treats them (reference section 1, Scheme and TLS).

A real TLS server on loopback with a throw-away certificate made by openssl for 127.0.0.1.
"""
from __future__ import annotations

import base64
import ssl
import subprocess
from http.server import ThreadingHTTPServer

import pytest
import requests

from tests.conftest import BackendHandler, fixture_bytes, pass_all, serve_in_thread


@pytest.fixture
def tls_backend(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=extender.test",
         "-addext", "subjectAltName=DNS:extender.test,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BackendHandler)
    httpd.behaviours = {"*": pass_all}  # type: ignore[attr-defined]
    httpd.received = []  # type: ignore[attr-defined]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    serve_in_thread(httpd)
    yield f"https://127.0.0.1:{httpd.server_address[1]}", cert.read_bytes(), httpd
    httpd.shutdown()
    httpd.server_close()


def config(url: str, **fields) -> dict:
    entry = {"name": "secure", "urlPrefix": f"{url}/x", "filterVerb": "filter", "nodeCacheCapable": True}
    entry.update(fields)
    return {"backends": [entry]}


def call(server) -> requests.Response:
    return requests.post(f"{server.url}/extender/secure/filter", data=fixture_bytes("filter-request.nodecache-true.json"), timeout=20)


def test_it_skips_verification_with_enable_https_and_no_ca(tls_backend, proxy, write_config):
    url, _, httpd = tls_backend
    server = proxy(write_config(config(url, enableHTTPS=True)))

    response = call(server)

    assert response.status_code == 200 and len(response.json()["NodeNames"]) == 5
    assert len(httpd.received) == 1


def test_it_verifies_against_the_given_ca(tls_backend, proxy, write_config):
    url, cert, _ = tls_backend
    server = proxy(write_config(config(url, enableHTTPS=True, tlsConfig={"caData": base64.b64encode(cert).decode()})))

    assert call(server).json()["Error"] == ""


def test_it_fails_the_call_when_the_certificate_is_not_trusted(tls_backend, proxy, write_config, tmp_path):
    url, _, httpd = tls_backend
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
         "-keyout", str(other / "k.pem"), "-out", str(other / "c.pem")],
        check=True, capture_output=True,
    )
    server = proxy(write_config(config(url, tlsConfig={"caFile": str(other / "c.pem")})))

    response = call(server)

    assert response.status_code == 200 and "extproxy: backend secure:" in response.json()["Error"]
    assert httpd.received == []


@pytest.mark.parametrize("server_name, trusted", [("extender.test", True), ("elsewhere.test", False)])
def test_it_checks_the_certificate_against_server_name(tls_backend, proxy, write_config, server_name, trusted):
    url, cert, _ = tls_backend
    ca = base64.b64encode(cert).decode()
    server = proxy(write_config(config(url, tlsConfig={"caData": ca, "serverName": server_name})))

    error = call(server).json()["Error"]

    assert (error == "") is trusted
    if not trusted:
        assert "extproxy: backend secure:" in error and "elsewhere.test" in error


def test_it_leaves_no_client_key_on_disk_after_loading_it(tls_backend, tmp_path, monkeypatch):
    import tempfile

    from extproxy.backends.http import ssl_context
    from extproxy.config import BackendConfig, TLSConfig

    url, cert, _ = tls_backend
    key = (tmp_path / "key.pem").read_bytes()  # the fixture's own key, written beside its cert
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "spool"))
    (tmp_path / "spool").mkdir()
    config = BackendConfig(name="s", url_prefix=f"{url}/x", tls_config=TLSConfig(cert_data=cert, key_data=key))

    assert ssl_context(config)
    assert list((tmp_path / "spool").iterdir()) == []
