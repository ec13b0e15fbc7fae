"""extproxy.config: both file kinds, the scheduler's strict decoding and validateExtenders rules."""
from __future__ import annotations

import base64
import json

import pytest
import yaml

from extproxy.config import (
    BackendConfig,
    ConfigError,
    ManagedResource,
    TLSConfig,
    default_config,
    derive_backend_name,
    derive_backend_names,
    load_config,
    parse_config,
    parse_go_duration,
)
from extproxy.protocol import Verb

V1 = "kubescheduler.config.k8s.io/v1"

# The v1 example of the protocol reference, section 3.1, verbatim.
REFERENCE_V1_EXAMPLE = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: "http://127.0.0.1:8888/scheduler"
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
"""


def scheduler_file(*extenders: dict, api_version: str = V1, **top) -> dict:
    return {"apiVersion": api_version, "kind": "KubeSchedulerConfiguration", **top, "extenders": list(extenders)}


def extender(**fields) -> dict:
    return {"urlPrefix": "http://ext.example.svc:8888/scheduler", "filterVerb": "filter", **fields}


def own_file(*backends: dict, **top) -> dict:
    return {"policies": {"default": {"rules": []}}, **top, "backends": list(backends)}


def policy_backend(**fields) -> dict:
    return {"name": "builtin", "policy": "default", **fields}


def parse_error(data) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "test.yaml")
    return info.value


# --------------------------------------------------------------------------- reference example


def test_it_loads_the_reference_v1_example(tmp_path):
    path = tmp_path / "scheduler.yaml"
    path.write_text(REFERENCE_V1_EXAMPLE)
    config = load_config(str(path))
    assert config.kind == "scheduler"
    assert config.source == str(path)
    assert config.policies == {}
    assert config.backends == (
        BackendConfig(
            name="127-scheduler",
            url_prefix="http://127.0.0.1:8888/scheduler",
            filter_verb="filter",
            prioritize_verb="prioritize",
            preempt_verb="preempt",
            bind_verb="bind",
            weight=5,
            http_timeout=3.0,
            http_timeout_raw="3s",
            node_cache_capable=True,
            managed_resources=(ManagedResource("example.com/gpu", ignored_by_scheduler=True),),
            ignorable=False,
        ),
    )


# --------------------------------------------------------------------------- defaults


def test_it_gives_the_builtin_policy_without_a_file():
    for path in (None, ""):
        config = load_config(path)
        assert config.kind == "default"
        assert config.source == "<default>"
        assert config.policies == {"default": {"rules": []}}
        (builtin,) = config.backends
        assert builtin == BackendConfig(
            name="builtin", policy="default", filter_verb="filter", prioritize_verb="prioritize",
            preempt_verb="preempt", weight=1,
        )
    assert default_config() == load_config(None)


@pytest.mark.parametrize(
    "attr, expected",
    [
        ("policy", ""),
        ("filter_verb", ""),
        ("prioritize_verb", ""),
        ("preempt_verb", ""),
        ("bind_verb", ""),
        ("weight", 0),
        ("enable_https", False),
        ("tls_config", None),
        ("http_timeout", 5.0),
        ("http_timeout_raw", ""),
        ("node_cache_capable", False),
        ("managed_resources", ()),
        ("ignorable", False),
    ],
)
def test_it_defaults_scheduler_extender_fields_like_the_scheduler(attr, expected):
    config = parse_config(scheduler_file({"urlPrefix": "http://a.b/x"}), "t")
    assert getattr(config.backends[0], attr) == expected


@pytest.mark.parametrize(
    "attr, expected",
    [
        ("url_prefix", ""),
        ("filter_verb", "filter"),
        ("prioritize_verb", "prioritize"),
        ("preempt_verb", "preempt"),
        ("bind_verb", ""),
        ("weight", 1),
        ("http_timeout", 5.0),
        ("node_cache_capable", False),
        ("managed_resources", ()),
        ("ignorable", False),
    ],
)
def test_it_defaults_policy_backend_fields(attr, expected):
    config = parse_config(own_file(policy_backend()), "t")
    assert getattr(config.backends[0], attr) == expected


@pytest.mark.parametrize(
    "fields, attr, expected",
    [
        ({"prioritizeVerb": ""}, "prioritize_verb", ""),
        ({"filterVerb": "check"}, "filter_verb", "check"),
        ({"bindVerb": "bind"}, "bind_verb", "bind"),
        ({"weight": 3}, "weight", 3),
        ({"filterVerb": None}, "filter_verb", "filter"),  # null is unset, as in Go
    ],
)
def test_it_lets_a_policy_backend_override_its_defaults(fields, attr, expected):
    config = parse_config(own_file(policy_backend(**fields)), "t")
    assert getattr(config.backends[0], attr) == expected


@pytest.mark.parametrize(
    "attr, expected",
    [
        ("recording.enabled", True),
        ("recording.queue_size", 10000),
        ("recording.batch_size", 500),
        ("recording.flush_interval", 0.1),
        ("recording.max_body_bytes", 64 * 1024 * 1024),
        ("redaction.env_values", True),
        ("redaction.drop_annotations", ("kubectl.kubernetes.io/last-applied-configuration",)),
        ("redaction.redact_annotations", ()),
        ("redaction.redact_labels", ()),
        ("retention.max_age_seconds", 7 * 86400),
        ("retention.max_calls", 0),
        ("parallel_filter", False),
        ("kind", "extproxy"),
    ],
)
def test_it_defaults_the_own_file_settings(attr, expected):
    value = parse_config(own_file(policy_backend()), "t")
    for part in attr.split("."):
        value = getattr(value, part)
    assert value == expected


def test_it_defaults_the_settings_of_scheduler_files_too():
    config = parse_config(scheduler_file(extender()), "t")
    assert config == parse_config(scheduler_file(extender()), "t")
    assert config.recording.enabled and config.retention.max_calls == 0 and not config.parallel_filter


# --------------------------------------------------------------------------- own file, full


def test_it_parses_a_complete_own_file():
    ca = base64.b64encode(b"CA PEM").decode()
    data = {
        "kind": "ExtproxyConfiguration",
        "parallelFilter": True,
        "policies": {"gpu": {"rules": [{"kind": "x"}]}},
        "backends": [
            {"name": "gpu", "policy": "gpu", "weight": 2, "managedResources": [{"name": "example.com/gpu"}]},
            {
                "name": "zone-ext", "urlPrefix": "https://zone.example.svc/sched/", "filterVerb": "f",
                "prioritizeVerb": "p", "weight": 4, "bindVerb": "b", "enableHTTPS": True,
                "tlsConfig": {"insecure": False, "serverName": "zone", "caData": ca, "certFile": "/c"},
                "httpTimeout": "750ms", "nodeCacheCapable": True, "ignorable": True,
            },
        ],
        "recording": {"enabled": False, "queueSize": 10, "batchSize": 5, "flushInterval": "250ms",
                      "maxBodyBytes": 1024},
        "redaction": {"envValues": False, "dropAnnotations": [], "redactAnnotations": ["secret"],
                      "redactLabels": ["owner"]},
        "retention": {"maxAge": "30d", "maxCalls": 1000},
    }
    config = parse_config(data, "own.yaml")
    assert config.kind == "extproxy" and config.parallel_filter
    assert config.policies == {"gpu": {"rules": [{"kind": "x"}]}}
    gpu, zone = config.backends
    assert gpu.policy == "gpu" and gpu.weight == 2 and gpu.managed_resources == (ManagedResource("example.com/gpu"),)
    assert zone.url_prefix == "https://zone.example.svc/sched/" and zone.enable_https and zone.ignorable
    assert zone.tls_config == TLSConfig(server_name="zone", cert_file="/c", ca_data=b"CA PEM")
    assert zone.http_timeout == 0.75 and zone.http_timeout_raw == "750ms"
    assert config.backend("zone-ext") is zone and config.backend("nope") is None
    assert config.recording.enabled is False and config.recording.flush_interval == 0.25
    assert config.recording.queue_size == 10 and config.recording.batch_size == 5
    assert config.recording.max_body_bytes == 1024
    assert config.redaction.drop_annotations == () and config.redaction.redact_labels == ("owner",)
    assert config.retention.max_age_seconds == 30 * 86400 and config.retention.max_calls == 1000


@pytest.mark.parametrize("value, seconds", [(2, 2.0), (0.05, 0.05), ("1s", 1.0), ("100ms", 0.1)])
def test_it_takes_flush_interval_as_seconds_or_duration(value, seconds):
    config = parse_config(own_file(policy_backend(), recording={"flushInterval": value}), "t")
    assert config.recording.flush_interval == seconds


@pytest.mark.parametrize(
    "value, seconds", [("7d", 7 * 86400), ("1.5d", 1.5 * 86400), ("1d12h", 86400 + 12 * 3600), ("36h", 36 * 3600),
                       ("0", 0.0)]
)
def test_it_takes_max_age_as_duration_or_days(value, seconds):
    config = parse_config(own_file(policy_backend(), retention={"maxAge": value}), "t")
    assert config.retention.max_age_seconds == seconds


# --------------------------------------------------------------------------- extender behaviour


def test_it_builds_urls_like_the_scheduler():
    backend = BackendConfig(name="a", url_prefix="http://127.0.0.1:8888/scheduler//")
    assert backend.url_for("filter") == "http://127.0.0.1:8888/scheduler/filter"
    assert backend.url_for("predicates/gpu") == "http://127.0.0.1:8888/scheduler/predicates/gpu"


@pytest.mark.parametrize(
    "verb_string, expected",
    [("filter", "filter"), ("prio", "prioritize"), ("preempt", "preempt"), ("bind", "bind"), ("nope", None),
     ("", None), ("Filter", None)],
)
def test_it_maps_verb_strings_to_verbs(verb_string, expected):
    backend = BackendConfig(name="a", filter_verb="filter", prioritize_verb="prio", preempt_verb="preempt",
                            bind_verb="bind")
    assert backend.verb_name(verb_string) == expected


def test_it_maps_a_shared_verb_string_to_the_first_verb():
    # First in Verb's order: filter, prioritize, bind, preempt.
    assert BackendConfig(name="a", filter_verb="x", prioritize_verb="x").verb_name("x") == "filter"
    assert BackendConfig(name="a", preempt_verb="x", bind_verb="x").verb_name("x") == "bind"
    assert BackendConfig(name="a").verb_name("") is None


def pod(containers=(), init_containers=()) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"containers": list(containers), "initContainers": list(init_containers)}}


GPU = BackendConfig(name="a", managed_resources=(ManagedResource("example.com/gpu"),))


@pytest.mark.parametrize(
    "backend, the_pod, expected",
    [
        (BackendConfig(name="a"), pod(), True),
        (GPU, pod(), False),
        (GPU, {}, False),
        (GPU, pod([{"resources": {"requests": {"example.com/gpu": "1"}}}]), True),
        (GPU, pod([{"resources": {"limits": {"example.com/gpu": "1"}}}]), True),
        (GPU, pod([{"name": "x"}], [{"resources": {"limits": {"example.com/gpu": "1"}}}]), True),
        (GPU, pod([{"resources": {"requests": {"cpu": "1"}, "limits": None}}]), False),
        (GPU, pod([{"resources": None}, {"resources": {"requests": {"example.com/gpu": "2"}}}]), True),
        # ephemeral containers and pod-level resources are not looked at
        (GPU, {"spec": {"ephemeralContainers": [{"resources": {"requests": {"example.com/gpu": "1"}}}],
                        "resources": {"requests": {"example.com/gpu": "1"}}}}, False),
    ],
)
def test_it_decides_interest_by_managed_resources(backend, the_pod, expected):
    assert backend.interested_in(the_pod) is expected


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("5s", 5.0), ("750ms", 0.75), ("1m30s", 90.0), ("1.5h", 5400.0), ("300us", 0.0003),
        ("300\u00b5s", 0.0003), ("300\u03bcs", 0.0003), ("10ns", 1e-8), ("0", 0.0), ("-0", 0.0),
        ("+5s", 5.0), ("-1.5s", -1.5), (".5s", 0.5), ("5.s", 5.0), ("1h2m3.5s", 3723.5), ("0s", 0.0),
        ("1.0000000001s", 1.0), ("2562047h", 2562047 * 3600.0),
    ],
)
def test_it_parses_go_durations(text, seconds):
    assert parse_go_duration(text) == pytest.approx(seconds, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "invalid duration"), ("5", "missing unit"), ("s", "invalid duration"), (".s", "invalid duration"),
        ("5x", 'unknown unit "x"'), ("5 s", "unknown unit"), ("5S", 'unknown unit "S"'), ("--5s", "invalid duration"),
        ("1d", 'unknown unit "d"'), ("5s ", "unknown unit"), ("3000000h", "invalid duration"), ("-", "invalid duration"),
    ],
)
def test_it_rejects_bad_go_durations(text, message):
    with pytest.raises(ValueError, match=message):
        parse_go_duration(text)


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "url_prefix, name",
    [
        ("http://gpu-ext.kube-system.svc:8888/scheduler", "gpu-ext-scheduler"),
        ("http://127.0.0.1:8888/scheduler", "127-scheduler"),
        ("http://localhost:8888", "localhost"),
        ("http://localhost:8888/", "localhost"),
        ("https://Zone_Ext.example.com/A/b//c/", "zone-ext-a-b-c"),
        ("http://ext.svc/v1/extender/", "ext-v1-extender"),
        ("http://user:pw@ext.svc:80/x", "ext-x"),
        ("http://--weird--.svc/__/", "weird"),
        ("", "extender"),
    ],
)
def test_it_derives_backend_names(url_prefix, name):
    assert derive_backend_name(url_prefix) == name


@pytest.mark.parametrize(
    "prefixes, names",
    [
        (["http://a.svc/x", "http://b.svc/x"], ["a-x", "b-x"]),
        (["http://a.svc/x", "http://a.other/x", "http://a.third/x"], ["a-x", "a-x-2", "a-x-3"]),
        (["http://a.svc/x", "http://b.svc/", "http://a.svc/x/"], ["a-x", "b", "a-x-2"]),
        (["http://a.svc/2", "http://a.svc/2"], ["a-2", "a-2-2"]),
        (["http://a-2.svc/", "http://a.svc/", "http://a.b/"], ["a-2", "a", "a-3"]),
        (["http://combined.svc/"], ["combined-2"]),  # "combined" is the API's name for combined calls
        ([], []),
    ],
)
def test_it_gives_colliding_names_suffixes_in_list_order(prefixes, names):
    assert derive_backend_names(prefixes) == names


def test_it_names_scheduler_extenders_by_derivation():
    data = scheduler_file(extender(urlPrefix="http://gpu-ext.kube-system.svc:8888/scheduler"),
                          extender(urlPrefix="http://gpu-ext.other.svc:8888/scheduler"))
    assert [b.name for b in parse_config(data, "t").backends] == ["gpu-ext-scheduler", "gpu-ext-scheduler-2"]


# --------------------------------------------------------------------------- file kinds and sources


@pytest.mark.parametrize("api_version", [V1, "kubescheduler.config.k8s.io/v1beta3", "kubescheduler.config.k8s.io/v1beta2"])
def test_it_accepts_the_supported_api_versions(api_version):
    config = parse_config(scheduler_file(extender(), api_version=api_version), "t")
    assert config.kind == "scheduler" and len(config.backends) == 1


def test_it_ignores_the_rest_of_a_scheduler_configuration():
    data = scheduler_file(extender(), profiles=[{"schedulerName": "default-scheduler"}],
                          leaderElection={"leaderElect": False}, parallelism=16)
    assert [b.name for b in parse_config(data, "t").backends] == ["ext-scheduler"]


@pytest.mark.parametrize(
    "data, field, reason",
    [
        (None, "(root)", "empty"),
        ([1, 2], "(root)", "expected a mapping"),
        ("text", "(root)", "expected a mapping"),
        ({"apiVersion": "kubescheduler.config.k8s.io/v1beta1", "kind": "KubeSchedulerConfiguration"}, "apiVersion",
         "unsupported apiVersion"),
        ({"apiVersion": "kubescheduler.config.k8s.io/v1alpha2", "kind": "KubeSchedulerConfiguration"}, "apiVersion",
         "unsupported apiVersion"),
        ({"kind": "KubeSchedulerConfiguration"}, "apiVersion", "unsupported apiVersion None"),
        ({"apiVersion": "v1", "kind": "Policy", "extenders": []}, "kind", "legacy Policy"),
        ({"apiVersion": V1, "kind": "Policy"}, "kind", "removed in kube-scheduler 1.23"),
        ({"apiVersion": "v1", "kind": "ConfigMap"}, "kind", "unsupported kind 'ConfigMap'"),
        ({"apiVersion": V1, "backends": []}, "kind", "missing"),
        ({"kind": "Other", "backends": []}, "kind", "unsupported kind"),
        (scheduler_file(), "extenders", "no extenders"),
        ({"apiVersion": V1, "kind": "KubeSchedulerConfiguration"}, "extenders", "no extenders"),
        (scheduler_file(extender(), extender()) | {"extenders": {"a": 1}}, "extenders", "expected a list"),
        (scheduler_file("http://a"), "extenders[0]", "expected a mapping"),
        ({"policies": {}}, "backends", "at least one backend"),
    ],
)
def test_it_rejects_bad_documents(data, field, reason):
    error = parse_error(data)
    assert error.field == field
    assert reason in error.reason
    assert str(error) == f"test.yaml: {field}: {error.reason}"


def write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("name", ["sched.yaml", "sched.yml", "sched.json", "sched.conf"])
def test_it_loads_scheduler_files_as_yaml_or_json(tmp_path, name):
    data = scheduler_file(extender(prioritizeVerb="prio", weight=2, httpTimeout="10s"))
    config = load_config(write(tmp_path, name, data))
    assert config.kind == "scheduler" and config.source.endswith(name)
    assert config.backends[0].weight == 2 and config.backends[0].http_timeout == 10.0


@pytest.mark.parametrize("name", ["own.yaml", "own.json"])
def test_it_loads_own_files_as_yaml_or_json(tmp_path, name):
    data = own_file(policy_backend(), {"name": "remote", "urlPrefix": "http://r.svc/x"}, parallelFilter=True)
    config = load_config(write(tmp_path, name, data))
    assert config.kind == "extproxy" and config.parallel_filter
    assert [b.name for b in config.backends] == ["builtin", "remote"]


@pytest.mark.parametrize(
    "name, text, reason",
    [
        ("bad.yaml", "extenders: [\n", "invalid YAML"),
        ("bad.yaml", "a: 1\n  b: 2\n", "invalid YAML"),
        ("bad.json", '{"extenders": [}', "invalid JSON"),
        ("dup.yaml", "kind: KubeSchedulerConfiguration\nkind: Policy\n", "duplicate key 'kind'"),
        ("dup.json", '{"backends": [], "backends": []}', "duplicate key 'backends'"),
        ("empty.yaml", "", "empty"),
        ("two.yaml", "a: 1\n---\nb: 2\n", "invalid YAML"),
    ],
)
def test_it_reports_syntax_errors_with_the_parsers_message(tmp_path, name, text, reason):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert reason in info.value.reason
    assert str(info.value).startswith(f"{path}: ")


def test_it_allows_yaml_merge_keys_to_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "base: &base {filterVerb: filter, weight: 1}\n"
        "extenders:\n- <<: *base\n  urlPrefix: http://a.svc/x\n  weight: 3\n  prioritizeVerb: p\n"
    )
    assert load_config(str(path)).backends[0].weight == 3


def test_it_reports_a_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "absent.yaml"))
    assert info.value.field == "(file)" and "no such file" in info.value.reason


# --------------------------------------------------------------------------- strict decoding


@pytest.mark.parametrize(
    "fields, field, reason",
    [
        ({"enableHttps": True}, "extenders[0].enableHttps", "v1beta1 and later spell it enableHTTPS"),
        ({"urlprefix": "http://x"}, "extenders[0].urlprefix", "did you mean 'urlPrefix'"),
        ({"FilterVerb": "filter"}, "extenders[0].FilterVerb", "case-sensitive"),
        ({"name": "x"}, "extenders[0].name", "unknown field 'name'"),
        ({"policy": "default"}, "extenders[0].policy", "unknown field"),
        ({"tlsConfig": {"insecure": True, "caPath": "/x"}}, "extenders[0].tlsConfig.caPath", "unknown field"),
        ({"managedResources": [{"name": "example.com/gpu", "ignored": True}]},
         "extenders[0].managedResources[0].ignored", "unknown field"),
    ],
)
def test_it_rejects_unknown_keys_in_scheduler_files(fields, field, reason):
    error = parse_error(scheduler_file(extender(**fields)))
    assert error.field == field and reason in error.reason


@pytest.mark.parametrize(
    "data, field",
    [
        (own_file(policy_backend(), extra=1), "extra"),
        (own_file(policy_backend(), kind="ExtproxyConfiguration", apiVersion="v1"), "apiVersion"),
        (own_file(policy_backend(), recording={"queue": 1}), "recording.queue"),
        (own_file(policy_backend(), redaction={"env": False}), "redaction.env"),
        (own_file(policy_backend(), retention={"maxAgeDays": 1}), "retention.maxAgeDays"),
        (own_file(policy_backend(urlprefix="http://x")), "backends[0].urlprefix"),
        (own_file(policy_backend(enableHTTPS=True)), "backends[0].enableHTTPS"),
        (own_file(policy_backend(tlsConfig={})), "backends[0].tlsConfig"),
        (own_file({"name": "r", "urlPrefix": "http://r.svc", "enableHttps": True}), "backends[0].enableHttps"),
        (own_file({"name": "r", "urlPrefix": "http://r.svc", "rules": []}), "backends[0].rules"),
    ],
)
def test_it_rejects_unknown_keys_in_own_files(data, field):
    error = parse_error(data)
    assert error.field == field and "unknown field" in error.reason


@pytest.mark.parametrize(
    "fields, field, reason",
    [
        ({"weight": "5"}, "weight", "expected an integer, got a string"),
        ({"weight": 5.0}, "weight", "expected an integer, got a number"),
        ({"weight": True}, "weight", "expected an integer, got a boolean"),
        ({"weight": 2**63}, "weight", "int64"),
        ({"filterVerb": 1}, "filterVerb", "expected a string"),
        ({"urlPrefix": ["http://x"]}, "urlPrefix", "expected a string"),
        ({"bindVerb": False}, "bindVerb", "expected a string"),
        ({"enableHTTPS": "true"}, "enableHTTPS", "expected a boolean"),
        ({"nodeCacheCapable": 1}, "nodeCacheCapable", "expected a boolean"),
        ({"ignorable": "no"}, "ignorable", "expected a boolean"),
        ({"httpTimeout": 5}, "httpTimeout", "expected a duration string"),
        ({"httpTimeout": 5000000000}, "httpTimeout", "expected a duration string"),  # Policy-style nanoseconds
        ({"httpTimeout": "5"}, "httpTimeout", "missing unit"),
        ({"httpTimeout": "-1s"}, "httpTimeout", "must not be negative"),
        ({"managedResources": {"name": "example.com/gpu"}}, "managedResources", "expected a list"),
        ({"managedResources": ["example.com/gpu"]}, "managedResources[0]", "expected a mapping"),
        ({"managedResources": [{"name": 1}]}, "managedResources[0].name", "expected a string"),
        ({"managedResources": [{"name": "example.com/gpu", "ignoredByScheduler": "yes"}]},
         "managedResources[0].ignoredByScheduler", "expected a boolean"),
        ({"tlsConfig": "insecure"}, "tlsConfig", "expected a mapping"),
        ({"tlsConfig": {"insecure": "true"}}, "tlsConfig.insecure", "expected a boolean"),
        ({"tlsConfig": {"serverName": 1}}, "tlsConfig.serverName", "expected a string"),
        ({"tlsConfig": {"caData": "not base64!"}}, "tlsConfig.caData", "invalid base64"),
        ({"tlsConfig": {"certData": "YWJj"[:3]}}, "tlsConfig.certData", "invalid base64"),
        ({"urlPrefix": ""}, "urlPrefix", "required"),
        ({"urlPrefix": "ext.svc:8888/scheduler"}, "urlPrefix", "not an http:// or https:// URL"),
        ({"urlPrefix": "ftp://ext.svc/x"}, "urlPrefix", "not an http:// or https:// URL"),
    ],
)
def test_it_checks_types_strictly(fields, field, reason):
    error = parse_error(scheduler_file(extender(**fields)))
    assert error.field == f"extenders[0].{field}"
    assert reason in error.reason


def test_it_decodes_tls_data_from_base64():
    tls = {"insecure": True, "serverName": "s", "certFile": "/c", "keyFile": "/k", "caFile": "/ca",
           "certData": base64.b64encode(b"cert").decode(), "keyData": base64.b64encode(b"key").decode(),
           "caData": "Y2Ey\n"}
    backend = parse_config(scheduler_file(extender(enableHTTPS=True, tlsConfig=tls)), "t").backends[0]
    assert backend.enable_https
    assert backend.tls_config == TLSConfig(True, "s", "/c", "/k", "/ca", b"cert", b"key", b"ca2")


@pytest.mark.parametrize(
    "fields, attr, expected",
    [
        ({"httpTimeout": "0s"}, "http_timeout", 5.0),
        ({"httpTimeout": "0"}, "http_timeout_raw", "0"),
        ({"httpTimeout": "1m"}, "http_timeout", 60.0),
        ({"httpTimeout": None}, "http_timeout_raw", ""),
        ({"managedResources": None}, "managed_resources", ()),
        ({"tlsConfig": None}, "tls_config", None),
        ({"weight": -3}, "weight", -3),  # ignored without prioritizeVerb, as the scheduler does
    ],
)
def test_it_treats_zero_and_null_like_the_scheduler(fields, attr, expected):
    backend = parse_config(scheduler_file(extender(**fields)), "t").backends[0]
    assert getattr(backend, attr) == expected


# --------------------------------------------------------------------------- validateExtenders


@pytest.mark.parametrize(
    "extenders, field, reason",
    [
        ([extender(prioritizeVerb="prioritize")], "extenders[0].weight", "must have a positive weight applied to it"),
        ([extender(prioritizeVerb="prioritize", weight=0)], "extenders[0].weight", "positive weight"),
        ([extender(), extender(prioritizeVerb="p", weight=-1)], "extenders[1].weight", "positive weight"),
        ([extender(bindVerb="bind"), extender(bindVerb="bind")], "extenders[1].bindVerb",
         "only one extender can implement bind"),
        ([extender(bindVerb="b", managedResources=[{"name": "a.com/x"}]),
          extender(filterVerb="f"), extender(bindVerb="b", managedResources=[{"name": "b.com/y"}])],
         "extenders[2].bindVerb", "only one extender can implement bind"),
    ],
)
def test_it_applies_weight_and_binder_rules(extenders, field, reason):
    error = parse_error(scheduler_file(*extenders))
    assert error.field == field and reason in error.reason


@pytest.mark.parametrize(
    "fields",
    [
        {"prioritizeVerb": "p", "weight": 1},
        {"prioritizeVerb": "", "weight": 0},
        {"weight": 0, "bindVerb": "bind"},
        {"filterVerb": "", "preemptVerb": "", "weight": 100000},
    ],
)
def test_it_accepts_valid_weights(fields):
    assert parse_config(scheduler_file(extender(**fields)), "t").backends


@pytest.mark.parametrize(
    "name",
    ["example.com/gpu", "nvidia.com/gpu", "a.b.c/x_y.z-1", "example.com/A", "x/y", "e" * 63 + ".com/" + "n" * 63],
)
def test_it_accepts_extended_resource_names(name):
    config = parse_config(scheduler_file(extender(managedResources=[{"name": name}])), "t")
    assert config.backends[0].managed_resources[0].name == name


@pytest.mark.parametrize(
    "name, reason",
    [
        ("gpu", "needs a domain prefix"),
        ("cpu", "needs a domain prefix"),
        ("kubernetes.io/gpu", "kubernetes.io domain"),
        ("node.kubernetes.io/gpu", "kubernetes.io domain"),
        ("requests.example.com/gpu", "must not start with requests."),
        ("", "name part must be non-empty"),
        ("example.com/", "name part must be non-empty"),
        ("/gpu", "prefix part must be non-empty"),
        ("Example.com/gpu", "lowercase RFC 1123 subdomain"),
        ("exa_mple.com/gpu", "lowercase RFC 1123 subdomain"),
        ("example.com/-gpu", "must start and end with an alphanumeric"),
        ("example.com/gpu/x", "qualified name"),
        ("example.com/" + "n" * 64, "no more than 63"),
        ("e" * 250 + ".com/gpu", "no more than 253"),
        ("e" * 242 + ".com/gpu", "quota form"),
    ],
)
def test_it_rejects_invalid_resource_names(name, reason):
    error = parse_error(scheduler_file(extender(managedResources=[{"name": "a.com/ok"}, {"name": name}])))
    assert error.field == "extenders[0].managedResources[1].name"
    assert reason in error.reason


@pytest.mark.parametrize(
    "extenders, field",
    [
        ([extender(managedResources=[{"name": "example.com/gpu"}, {"name": "example.com/gpu"}])],
         "extenders[0].managedResources[1].name"),
        ([extender(managedResources=[{"name": "example.com/gpu"}]),
          extender(managedResources=[{"name": "example.com/fpga"}, {"name": "example.com/gpu"}])],
         "extenders[1].managedResources[1].name"),
    ],
)
def test_it_rejects_duplicate_resource_names_across_extenders(extenders, field):
    error = parse_error(scheduler_file(*extenders))
    assert error.field == field and "duplicate extender managed resource name" in error.reason


def test_it_applies_the_scheduler_rules_to_own_files():
    cases = [
        (own_file(policy_backend(bindVerb="bind"), {"name": "r", "urlPrefix": "http://r.svc", "bindVerb": "b"}),
         "backends[1].bindVerb", "only one extender can implement bind"),
        (own_file(policy_backend(weight=0)), "backends[0].weight", "positive weight"),
        (own_file(policy_backend(managedResources=[{"name": "example.com/gpu"}]),
                  {"name": "r", "urlPrefix": "http://r.svc", "managedResources": [{"name": "example.com/gpu"}]}),
         "backends[1].managedResources[0].name", "duplicate"),
        (own_file(policy_backend(managedResources=[{"name": "kubernetes.io/gpu"}])),
         "backends[0].managedResources[0].name", "kubernetes.io"),
    ]
    for data, field, reason in cases:
        error = parse_error(data)
        assert (error.field, reason in error.reason) == (field, True)


# --------------------------------------------------------------------------- own-file rules


@pytest.mark.parametrize(
    "data, field, reason",
    [
        (own_file({"policy": "default"}), "backends[0].name", "required"),
        (own_file(policy_backend(name="GPU")), "backends[0].name", "must match [a-z0-9-]+"),
        (own_file(policy_backend(name="gpu_ext")), "backends[0].name", "must match"),
        (own_file(policy_backend(name="")), "backends[0].name", "must match"),
        (own_file(policy_backend(name=7)), "backends[0].name", "expected a string"),
        (own_file(policy_backend(name="combined")), "backends[0].name", "reserved"),
        (own_file(policy_backend(), policy_backend()), "backends[1].name", "duplicate backend name 'builtin'"),
        (own_file(policy_backend(urlPrefix="http://x.svc")), "backends[0]", "not both"),
        (own_file({"name": "x"}), "backends[0]", "needs either urlPrefix"),
        (own_file(policy_backend(policy="gpu")), "backends[0].policy", "unknown policy 'gpu'"),
        (own_file(policy_backend(), policies={}), "backends[0].policy", "unknown policy"),
        (own_file(policy_backend(policy=["default"])), "backends[0].policy", "expected a string"),
        (own_file(policy_backend(), policies={"default": ["rule"]}), "policies.default", "expected a mapping"),
        (own_file(policy_backend(), policies={"default": None}), "policies.default", "expected a mapping"),
        (own_file(policy_backend(), policies=["default"]), "policies", "expected a mapping"),
        (own_file(), "backends", "at least one backend"),
        (own_file(policy_backend()) | {"backends": {"builtin": {}}}, "backends", "expected a list"),
        (own_file("builtin"), "backends[0]", "expected a mapping"),
        (own_file(policy_backend(), parallelFilter="yes"), "parallelFilter", "expected a boolean"),
        (own_file(policy_backend(), recording=[]), "recording", "expected a mapping"),
        (own_file(policy_backend(), recording={"enabled": 1}), "recording.enabled", "expected a boolean"),
        (own_file(policy_backend(), recording={"queueSize": 0}), "recording.queueSize", "at least 1"),
        (own_file(policy_backend(), recording={"batchSize": "5"}), "recording.batchSize", "expected an integer"),
        (own_file(policy_backend(), recording={"maxBodyBytes": -1}), "recording.maxBodyBytes", "at least 1"),
        (own_file(policy_backend(), recording={"flushInterval": 0}), "recording.flushInterval", "positive"),
        (own_file(policy_backend(), recording={"flushInterval": "soon"}), "recording.flushInterval", "invalid duration"),
        (own_file(policy_backend(), recording={"flushInterval": True}), "recording.flushInterval", "duration string"),
        (own_file(policy_backend(), redaction={"envValues": "no"}), "redaction.envValues", "expected a boolean"),
        (own_file(policy_backend(), redaction={"dropAnnotations": "a"}), "redaction.dropAnnotations", "expected a list"),
        (own_file(policy_backend(), redaction={"redactLabels": [1]}), "redaction.redactLabels[0]", "expected a string"),
        (own_file(policy_backend(), retention={"maxAge": 3600}), "retention.maxAge", "duration string"),
        (own_file(policy_backend(), retention={"maxAge": "1w"}), "retention.maxAge", 'unknown unit "w"'),
        (own_file(policy_backend(), retention={"maxAge": "-1h"}), "retention.maxAge", "negative"),
        (own_file(policy_backend(), retention={"maxCalls": -1}), "retention.maxCalls", "at least 0"),
        (own_file(policy_backend(httpTimeout="-5s")), "backends[0].httpTimeout", "negative"),
        (own_file(policy_backend(weight="1")), "backends[0].weight", "expected an integer"),
    ],
)
def test_it_rejects_bad_own_files(data, field, reason):
    error = parse_error(data)
    assert error.field == field, error
    assert reason in error.reason, error


def test_it_accepts_the_optional_kind_of_own_files():
    data = own_file(policy_backend(), kind="ExtproxyConfiguration")
    assert parse_config(data, "t").kind == "extproxy"


def test_it_keeps_backends_in_file_order():
    data = own_file(*[{"name": f"b{i}", "urlPrefix": f"http://b{i}.svc/x"} for i in (3, 1, 2)])
    assert [b.name for b in parse_config(data, "t").backends] == ["b3", "b1", "b2"]


def test_it_exposes_field_and_reason_on_errors():
    error = ConfigError("f.yaml", "extenders[1].weight", "must have a positive weight applied to it")
    assert str(error) == "f.yaml: extenders[1].weight: must have a positive weight applied to it"
    assert (error.source, error.field, error.reason) == ("f.yaml", "extenders[1].weight",
                                                         "must have a positive weight applied to it")


@pytest.mark.parametrize(
    "target, url_prefix, policy",
    [("http://a:80/s", "http://a:80/s", ""), ("policy:gpu", "", "gpu"), ("combined", "combined", "")],
)
def test_it_rebuilds_a_recorded_backend_for_the_judges(target, url_prefix, policy):
    b = BackendConfig.as_recorded("a", target, Verb.PREEMPT, "pre", node_cache_capable=True, weight=3)
    assert (b.url_prefix, b.policy, b.target) == (url_prefix, policy, target)
    assert (b.preempt_verb, b.filter_verb, b.node_cache_capable, b.weight) == ("pre", "", True, 3)
    assert b.url_for("pre") == f"{target}/pre"
    assert BackendConfig.as_recorded("a", target, Verb.BIND, "").bind_verb == "bind"
