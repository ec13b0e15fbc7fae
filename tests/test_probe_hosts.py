"""Prometheus scrapes a pod at its own address (kubernetes_sd, role pod): the request's Host is
`<pod IP>:8000`, which no EXTPROXY_ALLOWED_HOSTS names (pod addresses change). deploy/ lets
Prometheus reach port 8000 for /metrics, yet every scrape answered 400 (Django's host check):
the target stayed down. A real serving process with the Deployment's host and https settings:
/metrics, /healthz and /readyz answer whatever the Host; the dashboard still refuses it."""
from __future__ import annotations

import re
from pathlib import Path

import requests

from tests.processes import Installation

DEPLOYMENT = Path(__file__).resolve().parent.parent / "deploy" / "deployment.yaml"
CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"
POD_ADDRESS = "10.244.1.7:8000"


def deployment_env(name: str) -> str:
    found = re.findall(r"name: " + name + r', value: "([^"]*)"', DEPLOYMENT.read_text())
    assert len(found) == 1, f"deploy/deployment.yaml sets {name} once"
    return found[0]


def test_a_scrape_at_the_pod_address_is_answered_and_the_dashboard_still_checks_the_host(tmp_path):
    installation = Installation(tmp_path, CONFIG, EXTPROXY_ALLOWED_HOSTS=deployment_env("EXTPROXY_ALLOWED_HOSTS"),
                                EXTPROXY_HTTPS=deployment_env("EXTPROXY_HTTPS"))
    try:
        installation.start_serving()
        scrape = requests.get(installation.url + "/metrics", headers={"Host": POD_ADDRESS}, timeout=10)
        assert scrape.status_code == 200, scrape.text[:500]
        assert "extproxy_recorder_queue_depth" in scrape.text
        for probe in ("/healthz", "/readyz"):  # kubelet's probes need no Host header of their own
            assert requests.get(installation.url + probe, headers={"Host": POD_ADDRESS}, timeout=10).status_code == 200
        dashboard = requests.get(installation.url + "/", headers={"Host": POD_ADDRESS}, timeout=10, allow_redirects=False)
        assert dashboard.status_code == 400
    finally:
        installation.close()
