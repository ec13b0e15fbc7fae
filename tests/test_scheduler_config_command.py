"""manage.py scheduler_config: the per-backend extenders section pointing kube-scheduler at extproxy."""
from __future__ import annotations

import base64
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from extproxy.config import parse_config

SCHEDULER_FILE = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
extenders:
- urlPrefix: "http://gpu-ext.kube-system.svc:8888/scheduler"
  filterVerb: filter
  prioritizeVerb: prioritize
  preemptVerb: preempt
  bindVerb: bind
  weight: 5
  httpTimeout: 3s
  nodeCacheCapable: true
  ignorable: false
  managedResources:
  - name: example.com/gpu
    ignoredByScheduler: true
- urlPrefix: "https://gpu-ext.other.svc:8443/scheduler/"
  filterVerb: predicates/zone
  enableHTTPS: true
  tlsConfig:
    insecure: true
    caData: "%s"
  ignorable: true
""" % base64.b64encode(b"backend CA").decode()


@pytest.fixture
def scheduler_file(tmp_path, settings):
    path = tmp_path / "kube-scheduler.yaml"
    path.write_text(SCHEDULER_FILE)
    settings.EXTPROXY_CONFIG = str(path)
    return str(path)


@pytest.fixture
def no_host_env(monkeypatch):
    monkeypatch.delenv("HOST", raising=False)
    monkeypatch.delenv("PORT", raising=False)
    monkeypatch.delenv("EXTPROXY_EXTENDER_PORT", raising=False)


def run(*args: str) -> str:
    out = StringIO()
    call_command("scheduler_config", *args, stdout=out)
    return out.getvalue()


def extenders(output: str) -> list[dict]:
    return yaml.safe_load(output)["extenders"]


def test_it_points_each_backend_at_the_proxy(scheduler_file, no_host_env):
    first, second = extenders(run())
    assert first == {
        "urlPrefix": "http://127.0.0.1:8000/extender/gpu-ext-scheduler",
        "filterVerb": "filter",
        "preemptVerb": "preempt",
        "prioritizeVerb": "prioritize",
        "weight": 5,
        "bindVerb": "bind",
        "httpTimeout": "3s",
        "nodeCacheCapable": True,
        "managedResources": [{"name": "example.com/gpu", "ignoredByScheduler": True}],
        "ignorable": False,
    }
    assert second == {
        "urlPrefix": "http://127.0.0.1:8000/extender/gpu-ext-scheduler-2",
        "filterVerb": "predicates/zone",
        "nodeCacheCapable": False,
        "ignorable": True,
    }


def test_it_prints_the_derived_names_as_comments(scheduler_file, no_host_env):
    output = run()
    assert "# backend gpu-ext-scheduler <- http://gpu-ext.kube-system.svc:8888/scheduler\n" in output
    assert "# backend gpu-ext-scheduler-2 <- https://gpu-ext.other.svc:8443/scheduler/\n" in output
    assert output.index("# backend") < output.index("extenders:")


def test_it_prints_a_section_the_config_loader_accepts(scheduler_file, no_host_env):
    data = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            **yaml.safe_load(run())}
    config = parse_config(data, "printed")
    assert [b.name for b in config.backends] == ["127-extender-gpu-ext-scheduler", "127-extender-gpu-ext-scheduler-2"]
    assert config.backends[0].weight == 5 and config.backends[1].ignorable


@pytest.mark.parametrize(
    "args, env, prefix",
    [
        ((), {}, "http://127.0.0.1:8000/extender/"),
        ((), {"HOST": "extproxy.kube-system.svc", "PORT": "9000"}, "http://extproxy.kube-system.svc:9000/extender/"),
        (("--host", "10.0.0.5", "--port", "8080"), {"HOST": "ignored", "PORT": "1"}, "http://10.0.0.5:8080/extender/"),
        (("--host", "::1"), {}, "http://[::1]:8000/extender/"),
        (("--scheme", "https", "--port", "8443"), {}, "https://127.0.0.1:8443/extender/"),
        # the separate extender listener is the scheduler's port when it is configured
        ((), {"PORT": "9000", "EXTPROXY_EXTENDER_PORT": "9001"}, "http://127.0.0.1:9001/extender/"),
        (("--port", "8080"), {"EXTPROXY_EXTENDER_PORT": "9001"}, "http://127.0.0.1:8080/extender/"),
    ],
)
def test_it_builds_the_proxy_url_from_options_or_environment(scheduler_file, monkeypatch, args, env, prefix):
    monkeypatch.delenv("HOST", raising=False)
    monkeypatch.delenv("PORT", raising=False)
    monkeypatch.delenv("EXTPROXY_EXTENDER_PORT", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    urls = [e["urlPrefix"] for e in extenders(run(*args))]
    assert urls == [prefix + "gpu-ext-scheduler", prefix + "gpu-ext-scheduler-2"]


def test_it_leaves_out_tls_for_plain_http(scheduler_file, no_host_env):
    for entry in extenders(run()):
        assert "enableHTTPS" not in entry and "tlsConfig" not in entry


def test_it_adds_enable_https_for_the_https_scheme(scheduler_file, no_host_env):
    output = run("--scheme", "https")
    for entry in extenders(output):
        assert entry["enableHTTPS"] is True
        assert "tlsConfig" not in entry  # the backend's own TLS settings never leak into the scheduler's
    assert "will not verify the proxy's certificate" in output


def test_it_adds_tls_config_for_the_proxy_when_asked(scheduler_file, no_host_env):
    output = run("--scheme", "https", "--tls-ca-file", "/etc/extproxy/ca.crt", "--tls-server-name", "extproxy")
    for entry in extenders(output):
        assert entry["tlsConfig"] == {"serverName": "extproxy", "caFile": "/etc/extproxy/ca.crt"}
    assert "will not verify" not in output


def test_it_prints_the_builtin_policy_without_a_config_file(settings, no_host_env):
    settings.EXTPROXY_CONFIG = ""
    output = run()
    assert "# backend builtin <- policy default" in output
    assert extenders(output) == [{
        "urlPrefix": "http://127.0.0.1:8000/extender/builtin",
        "filterVerb": "filter",
        "preemptVerb": "preempt",
        "prioritizeVerb": "prioritize",
        "weight": 1,
        "nodeCacheCapable": False,
        "ignorable": False,
    }]


def test_it_keeps_own_file_names_and_omits_unset_timeouts(tmp_path, settings, no_host_env):
    path = tmp_path / "extproxy.json"
    path.write_text(
        '{"policies": {"gpu": {"rules": []}}, "backends": ['
        '{"name": "gpu-rules", "policy": "gpu", "prioritizeVerb": "", "httpTimeout": "2s",'
        ' "managedResources": [{"name": "example.com/gpu"}]},'
        '{"name": "remote", "urlPrefix": "http://remote.svc/x", "bindVerb": "bind", "nodeCacheCapable": true}]}'
    )
    settings.EXTPROXY_CONFIG = str(path)
    output = run()
    assert "# backend gpu-rules <- policy gpu" in output and "# backend remote <- http://remote.svc/x" in output
    policy, remote = extenders(output)
    assert policy == {
        "urlPrefix": "http://127.0.0.1:8000/extender/gpu-rules",
        "filterVerb": "filter",
        "preemptVerb": "preempt",
        "weight": 1,
        "httpTimeout": "2s",
        "nodeCacheCapable": False,
        "managedResources": [{"name": "example.com/gpu", "ignoredByScheduler": False}],
        "ignorable": False,
    }
    assert remote == {
        "urlPrefix": "http://127.0.0.1:8000/extender/remote",
        "bindVerb": "bind",
        "nodeCacheCapable": True,
        "ignorable": False,
    }


def test_it_reports_a_bad_config_file(tmp_path, settings):
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                    "extenders:\n- urlPrefix: http://a.svc/x\n  enableHttps: true\n")
    settings.EXTPROXY_CONFIG = str(path)
    with pytest.raises(CommandError, match=r"bad\.yaml: extenders\[0\]\.enableHttps: .*enableHTTPS"):
        run()


@pytest.mark.parametrize("port", ["http", "0", "70000"])
def test_it_rejects_a_bad_port(scheduler_file, port):
    with pytest.raises(CommandError, match="--port"):
        run("--port", port)


def test_it_refuses_a_combined_entry_that_would_lose_ignored_by_scheduler(scheduler_file):
    # The second backend sees every pod, so one entry cannot carry the first one's
    # ignoredByScheduler resource: the scheduler's fit filter would start checking it.
    with pytest.raises(CommandError, match="--combined: cannot be represented.*ignoredByScheduler"):
        run("--combined")


def test_it_refuses_an_ignorable_binder_beside_non_ignorable_backends(tmp_path, settings):
    path = tmp_path / "x.yaml"
    path.write_text(
        "backends:\n- {name: a, urlPrefix: 'http://a:1/x', filterVerb: filter}\n"
        "- {name: b, urlPrefix: 'http://b:1/x', bindVerb: bind, ignorable: true}\n"
    )
    settings.EXTPROXY_CONFIG = str(path)
    with pytest.raises(CommandError, match="ignorable binder"):
        run("--combined")


def test_it_prints_one_combined_entry_derived_from_the_backends(tmp_path, settings, no_host_env):
    path = tmp_path / "x.yaml"
    path.write_text(
        "backends:\n"
        "- {name: gpu, urlPrefix: 'http://gpu:1/x', filterVerb: filter, prioritizeVerb: prio, weight: 5,"
        " httpTimeout: 3s, nodeCacheCapable: true, managedResources: [{name: example.com/gpu, ignoredByScheduler: true}]}\n"
        "- {name: fpga, urlPrefix: 'http://fpga:1/x', filterVerb: f, preemptVerb: p, bindVerb: b, httpTimeout: 2s,"
        " ignorable: false, managedResources: [{name: example.com/fpga}]}\n"
    )
    settings.EXTPROXY_CONFIG = str(path)
    out = run("--combined", "--host", "extproxy.svc", "--port", "9000")
    (entry,) = yaml.safe_load(out)["extenders"]
    assert entry["urlPrefix"] == "http://extproxy.svc:9000/extender"
    assert (entry["filterVerb"], entry["prioritizeVerb"], entry["preemptVerb"], entry["bindVerb"]) == (
        "filter", "prioritize", "preempt", "bind")
    assert entry["weight"] == 1 and entry["nodeCacheCapable"] is False and entry["ignorable"] is False
    assert entry["managedResources"] == [
        {"name": "example.com/gpu", "ignoredByScheduler": True},
        {"name": "example.com/fpga", "ignoredByScheduler": False},
    ]
    assert entry["httpTimeout"] == "6s"  # the 3s + 2s filter chain, plus a margin
    assert "# backend gpu <- http://gpu:1/x" in out


def test_it_prints_the_pair_of_the_extender_ports_tls_with_a_client_certificate(scheduler_file, no_host_env, settings,
                                                                              monkeypatch):
    monkeypatch.setenv("EXTPROXY_EXTENDER_PORT", "8443")
    settings.EXTPROXY_EXTENDER_TLS_CERT = "/etc/extproxy-tls/tls.crt"
    settings.EXTPROXY_EXTENDER_TLS_CLIENT_CA = "/etc/extproxy-tls/ca.crt"
    err = StringIO()
    call_command("scheduler_config", "--host", "extproxy-extender.kube-system.svc", stdout=StringIO(), stderr=err)
    assert "--tls-cert-file" in err.getvalue()  # the port requires one: say so

    output = run("--host", "extproxy-extender.kube-system.svc", "--tls-ca-file", "/pki/extproxy-ca.crt",
                 "--tls-cert-file", "/pki/extproxy-client.crt", "--tls-key-file", "/pki/extproxy-client.key")

    for entry in extenders(output):
        assert entry["urlPrefix"].startswith("https://extproxy-extender.kube-system.svc:8443/extender/")
        assert entry["enableHTTPS"] is True
        assert entry["tlsConfig"] == {"certFile": "/pki/extproxy-client.crt", "keyFile": "/pki/extproxy-client.key",
                                      "caFile": "/pki/extproxy-ca.crt"}


def test_it_warns_when_the_port_given_is_the_main_port_while_the_extender_has_its_own(scheduler_file, monkeypatch):
    """README's first steps say `--port <port>`: an operator of the shipped Deployment (extender
    port 8443) who gave the dashboard's port 8000 got a configuration whose every call is a 404."""
    monkeypatch.delenv("HOST", raising=False)
    monkeypatch.delenv("PORT", raising=False)
    monkeypatch.setenv("EXTPROXY_EXTENDER_PORT", "8443")
    err = StringIO()
    call_command("scheduler_config", "--port", "8000", stdout=StringIO(), stderr=err)
    assert "8443" in err.getvalue() and "/extender/" in err.getvalue()
    quiet = StringIO()
    call_command("scheduler_config", "--port", "8443", stdout=StringIO(), stderr=quiet)
    assert quiet.getvalue() == ""
