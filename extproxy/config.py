"""The backend configuration file: loading, decoding and validation.

Owns the two file kinds `EXTPROXY_CONFIG` may name (a KubeSchedulerConfiguration, whose
`extenders` become the backends, or extproxy's own file) and turns either into one immutable
`ProxyConfig`. Decoding is strict and case-sensitive like kube-scheduler's own config decoder, and
the extender list is validated with the scheduler's `validateExtenders` rules, so a file the
scheduler would refuse is refused here too, with the field path and the reason.

Pure Python: no Django import and no I/O beyond reading the one file, so replay, management
commands and tests can use it anywhere. Policy rule bodies are kept raw; `extproxy.policies`
validates them.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import yaml

SCHEDULER_KIND = "KubeSchedulerConfiguration"
EXTPROXY_KIND = "ExtproxyConfiguration"
SCHEDULER_API_GROUP = "kubescheduler.config.k8s.io"
SUPPORTED_API_VERSIONS = tuple(f"{SCHEDULER_API_GROUP}/{v}" for v in ("v1", "v1beta3", "v1beta2"))
DEFAULT_HTTP_TIMEOUT = 5.0  # DefaultExtenderTimeout, substituted at run time for 0/unset
RESERVED_BACKEND_NAMES = frozenset({"combined"})  # the API's name for combined calls
VERBS = ("filter", "prioritize", "preempt", "bind")
_INT64_MAX = 2**63 - 1


class ConfigError(Exception):
    """A bad configuration file: which file, which field, and why."""

    def __init__(self, source: str, field: str, reason: str):
        super().__init__(f"{source}: {field}: {reason}")
        self.source = source
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class ManagedResource:
    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class TLSConfig:
    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: bytes = b""
    key_data: bytes = b""
    ca_data: bytes = b""


@dataclass(frozen=True)
class BackendConfig:
    name: str
    url_prefix: str = ""
    policy: str = ""
    filter_verb: str = ""
    prioritize_verb: str = ""
    preempt_verb: str = ""
    bind_verb: str = ""
    weight: int = 0
    enable_https: bool = False
    tls_config: TLSConfig | None = None
    http_timeout: float = DEFAULT_HTTP_TIMEOUT
    http_timeout_raw: str = ""
    node_cache_capable: bool = False
    managed_resources: tuple[ManagedResource, ...] = ()
    ignorable: bool = False

    @property
    def is_policy(self) -> bool:
        return bool(self.policy)

    def verb_string(self, verb: str) -> str:
        """The configured verb string for "filter"/"prioritize"/"preempt"/"bind" ("" = unsupported)."""
        return getattr(self, f"{verb}_verb")

    def verb_name(self, verb_string: str) -> str | None:
        if not verb_string:
            return None
        for verb in VERBS:
            if self.verb_string(verb) == verb_string:
                return verb
        return None

    def url_for(self, verb_string: str) -> str:
        # Exactly as HTTPExtender.send builds it: no escaping, no trailing slash.
        return self.url_prefix.rstrip("/") + "/" + verb_string

    def interested_in(self, pod: dict) -> bool:
        if not self.managed_resources:
            return True
        managed = {r.name for r in self.managed_resources}
        spec = (pod or {}).get("spec") or {}
        for key in ("containers", "initContainers"):
            for container in spec.get(key) or ():
                resources = (container or {}).get("resources") or {}
                for kind in ("requests", "limits"):
                    if managed.intersection((resources.get(kind) or {}).keys()):
                        return True
        return False


@dataclass(frozen=True)
class RecordingConfig:
    enabled: bool = True
    queue_size: int = 10000
    batch_size: int = 500
    flush_interval: float = 0.1
    max_body_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class RedactionConfig:
    env_values: bool = True
    drop_annotations: tuple[str, ...] = ("kubectl.kubernetes.io/last-applied-configuration",)
    redact_annotations: tuple[str, ...] = ()
    redact_labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class RetentionConfig:
    max_age_seconds: float = 7 * 86400  # 0 = no age limit
    max_calls: int = 0  # 0 = unlimited


@dataclass(frozen=True)
class ProxyConfig:
    backends: tuple[BackendConfig, ...]
    policies: dict[str, Any] = field(default_factory=dict)
    recording: RecordingConfig = RecordingConfig()
    redaction: RedactionConfig = RedactionConfig()
    retention: RetentionConfig = RetentionConfig()
    parallel_filter: bool = False
    source: str = "<default>"
    kind: str = "default"

    def backend(self, name: str) -> BackendConfig | None:
        for backend in self.backends:
            if backend.name == name:
                return backend
        return None


# --------------------------------------------------------------------------- entry points


def default_config() -> ProxyConfig:
    builtin = BackendConfig(
        name="builtin",
        policy="default",
        filter_verb="filter",
        prioritize_verb="prioritize",
        preempt_verb="preempt",
        weight=1,
    )
    return ProxyConfig(backends=(builtin,), policies={"default": {"rules": []}})


def load_config(path: str | None) -> ProxyConfig:
    if not path:
        return default_config()
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(source, "(file)", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, "(file)", f"cannot read: {exc}") from None
    if source.lower().endswith(".json"):
        data = _load_json(text, source)
    else:
        data = _load_yaml(text, source)
    return parse_config(data, source)


def parse_config(data: Any, source: str) -> ProxyConfig:
    if data is None:
        raise ConfigError(source, "(root)", "the file is empty")
    if not isinstance(data, dict):
        raise ConfigError(source, "(root)", f"expected a mapping, got {_type_name(data)}")
    kind = data.get("kind")
    api_version = data.get("apiVersion")
    if kind == SCHEDULER_KIND:
        if api_version not in SUPPORTED_API_VERSIONS:
            raise ConfigError(
                source,
                "apiVersion",
                f"unsupported apiVersion {api_version!r} for {SCHEDULER_KIND} "
                f"(supported: {', '.join(SUPPORTED_API_VERSIONS)})",
            )
        return _Decoder(source).scheduler_file(data)
    if kind == "Policy":
        raise ConfigError(
            source,
            "kind",
            "the legacy Policy file (removed in kube-scheduler 1.23) is not supported; move its "
            f"extenders into a {SCHEDULER_KIND} (apiVersion {SUPPORTED_API_VERSIONS[0]}), "
            "spelling enableHTTPS and httpTimeout as a duration string",
        )
    if kind is None and api_version is not None:
        raise ConfigError(source, "kind", f"missing (apiVersion {api_version!r} is given)")
    if kind not in (None, EXTPROXY_KIND):
        raise ConfigError(
            source, "kind", f"unsupported kind {kind!r} (expected {SCHEDULER_KIND} or {EXTPROXY_KIND})"
        )
    return _Decoder(source).extproxy_file(data)


# --------------------------------------------------------------------------- durations

_DURATION_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")


def parse_go_duration(text: str) -> float:
    """Seconds for a Go `time.ParseDuration` string; ValueError (with Go's wording) otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"time: invalid duration {text!r}: not a string")
    invalid = f'time: invalid duration "{text}"'
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return 0.0
    if not rest:
        raise ValueError(invalid)
    total_ns = 0
    while rest:
        match = _DURATION_PART.match(rest)
        assert match is not None  # every part of the pattern may be empty: it always matches
        whole, frac, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not frac:
            raise ValueError(invalid)
        if not unit:
            raise ValueError(f'time: missing unit in duration "{text}"')
        if unit not in _DURATION_UNITS_NS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{text}"')
        value = Fraction(int(whole or "0"))
        if frac:
            value += Fraction(int(frac), 10 ** len(frac))
        total_ns += int(value * _DURATION_UNITS_NS[unit])  # Go truncates sub-nanoseconds
        if total_ns > _INT64_MAX:
            raise ValueError(invalid)
        rest = rest[match.end():]
    seconds = total_ns / 1e9
    return -seconds if negative else seconds


_DAYS = re.compile(r"(\d+(?:\.\d*)?|\.\d+)d(.*)", re.DOTALL)


def parse_age(text: str) -> float:
    """A Go duration, or days in front of one: "7d", "1.5d", "7d12h"."""
    match = _DAYS.fullmatch(text) if isinstance(text, str) else None
    if not match:
        return parse_go_duration(text)
    days = float(match.group(1)) * 86400
    return days + (parse_go_duration(match.group(2)) if match.group(2) else 0.0)


# --------------------------------------------------------------------------- backend names

_NOT_NAME_CHARS = re.compile(r"[^a-z0-9]+")
BACKEND_NAME_RE = re.compile(r"[a-z0-9-]+")


def derive_backend_name(url_prefix: str) -> str:
    """First host label plus each path segment, joined by "-", reduced to [a-z0-9-]."""
    try:
        parts = urlsplit(url_prefix.strip())
        host = parts.hostname or ""
        path = parts.path
    except ValueError:
        host, path = "", url_prefix
    pieces = [host.split(".", 1)[0]] + [seg for seg in path.split("/") if seg]
    name = _NOT_NAME_CHARS.sub("-", "-".join(pieces).lower()).strip("-")
    return name or "extender"


def derive_backend_names(url_prefixes: list[str]) -> list[str]:
    taken: set[str] = set(RESERVED_BACKEND_NAMES)
    names = []
    for prefix in url_prefixes:
        base = name = derive_backend_name(prefix)
        n = 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        names.append(name)
    return names


# --------------------------------------------------------------------------- file parsing


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses duplicate keys, as the scheduler's strict decoder does."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # "<<" merges may be overridden by explicit keys
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable key: the base constructor reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(source, "(syntax)", f"invalid YAML: {exc}") from None


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _load_json(text: str, source: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_json_pairs)
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise ConfigError(source, "(syntax)", f"invalid JSON: {exc}") from None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


# Keys of one scheduler extender entry (config/v1 Extender), with their decoders' names.
_EXTENDER_KEYS = (
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
    "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable",
)
_POLICY_BACKEND_KEYS = tuple(k for k in _EXTENDER_KEYS if k not in ("urlPrefix", "enableHTTPS", "tlsConfig"))
_TLS_KEYS = ("insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData")
_KNOWN_SPELLINGS = {
    "enableHttps": "the legacy (Policy/v1alpha) spelling; v1beta1 and later spell it enableHTTPS",
}


class _Decoder:
    """Strict, case-sensitive decoding of one file; every error names its field path."""

    def __init__(self, source: str):
        self.source = source

    def error(self, path: str, reason: str) -> ConfigError:
        return ConfigError(self.source, path, reason)

    # -- primitive checks; None means "unset", as null does for Go's decoder

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping, got {_type_name(value)}")
        for key in value:
            if key not in allowed:
                raise self.error(_join(path, str(key)), self.unknown_key_reason(key, allowed))
        return value

    @staticmethod
    def unknown_key_reason(key: Any, allowed: tuple[str, ...]) -> str:
        reason = f"unknown field {str(key)!r}"
        if key in _KNOWN_SPELLINGS:
            return f"{reason}: {_KNOWN_SPELLINGS[key]}"
        for candidate in allowed:
            if isinstance(key, str) and key.lower() == candidate.lower():
                return f"{reason} (keys are case-sensitive: did you mean {candidate!r}?)"
        return f"{reason} (allowed: {', '.join(allowed)})"

    def string(self, value: Any, path: str, default: str = "") -> str:
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(path, f"expected a string, got {_type_name(value)}")
        return value

    def boolean(self, value: Any, path: str, default: bool = False) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(path, f"expected a boolean, got {_type_name(value)}")
        return value

    def integer(self, value: Any, path: str, default: int = 0, minimum: int | None = None) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, f"expected an integer, got {_type_name(value)}")
        if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
            raise self.error(path, f"{value} is out of the int64 range")
        if minimum is not None and value < minimum:
            raise self.error(path, f"must be at least {minimum}, got {value}")
        return value

    def sequence(self, value: Any, path: str) -> list:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(path, f"expected a list, got {_type_name(value)}")
        return value

    def strings(self, value: Any, path: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        if value is None:
            return default
        items = self.sequence(value, path)
        return tuple(self.string(item, f"{path}[{i}]") for i, item in enumerate(items))

    def duration(self, value: Any, path: str, parse: Callable[[str], float] = parse_go_duration) -> float:
        if not isinstance(value, str):
            raise self.error(path, f'expected a duration string such as "5s", got {_type_name(value)}')
        try:
            seconds = parse(value)
        except ValueError as exc:
            raise self.error(path, str(exc)) from None
        if seconds < 0:
            raise self.error(path, f"must not be negative, got {value!r}")
        return seconds

    def base64_bytes(self, value: Any, path: str) -> bytes:
        text = self.string(value, path)
        try:  # Go's []byte decoding: standard alphabet, padding required, CR/LF ignored
            return base64.b64decode(text.replace("\r", "").replace("\n", ""), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise self.error(path, f"invalid base64: {exc}") from None

    # -- the two file kinds

    def scheduler_file(self, data: dict) -> ProxyConfig:
        # Only `extenders` matters; the rest of the scheduler's configuration is its own business.
        entries = self.sequence(data.get("extenders"), "extenders")
        if not entries:
            raise self.error("extenders", f"the {SCHEDULER_KIND} lists no extenders; there is nothing to proxy")
        prefixes = []
        for i, entry in enumerate(entries):
            entry = self.mapping(entry, f"extenders[{i}]", _EXTENDER_KEYS)
            prefixes.append(self.string(entry.get("urlPrefix"), f"extenders[{i}].urlPrefix"))
        names = derive_backend_names(prefixes)
        backends = tuple(
            self.backend(entry, f"extenders[{i}]", names[i], http=True) for i, entry in enumerate(entries)
        )
        self.validate_backends(backends, "extenders")
        return ProxyConfig(backends=backends, policies={}, source=self.source, kind="scheduler")

    def extproxy_file(self, data: dict) -> ProxyConfig:
        self.mapping(data, "(root)", ("kind", "backends", "policies", "parallelFilter", "recording",
                                      "redaction", "retention"))
        policies = self.policies(data.get("policies"))
        entries = self.sequence(data.get("backends"), "backends")
        if not entries:
            raise self.error("backends", "at least one backend is required")
        backends: list[BackendConfig] = []
        seen: dict[str, str] = {}
        for i, entry in enumerate(entries):
            path = f"backends[{i}]"
            backend = self.own_backend(entry, path, policies)
            if backend.name in seen:
                raise self.error(f"{path}.name", f"duplicate backend name {backend.name!r} (also {seen[backend.name]})")
            seen[backend.name] = path
            backends.append(backend)
        self.validate_backends(tuple(backends), "backends")
        return ProxyConfig(
            backends=tuple(backends),
            policies=policies,
            recording=self.recording(data.get("recording")),
            redaction=self.redaction(data.get("redaction")),
            retention=self.retention(data.get("retention")),
            parallel_filter=self.boolean(data.get("parallelFilter"), "parallelFilter"),
            source=self.source,
            kind="extproxy",
        )

    def policies(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error("policies", f"expected a mapping of policy name to policy, got {_type_name(value)}")
        for name, body in value.items():
            if not isinstance(name, str) or not name:
                raise self.error("policies", f"policy names must be non-empty strings, got {name!r}")
            if not isinstance(body, dict):
                raise self.error(f"policies.{name}", f"expected a mapping, got {_type_name(body)}")
        return dict(value)

    def own_backend(self, entry: Any, path: str, policies: dict[str, Any]) -> BackendConfig:
        if not isinstance(entry, dict):
            raise self.error(path, f"expected a mapping, got {_type_name(entry)}")
        has_url, has_policy = entry.get("urlPrefix") is not None, entry.get("policy") is not None
        if has_url and has_policy:
            raise self.error(path, "set either urlPrefix (an HTTP extender) or policy (built-in rules), not both")
        if not has_url and not has_policy:
            raise self.error(path, "needs either urlPrefix (an HTTP extender) or policy (built-in rules)")
        if "name" not in entry:
            raise self.error(f"{path}.name", "required")
        name = self.string(entry["name"], f"{path}.name")
        if not BACKEND_NAME_RE.fullmatch(name):
            raise self.error(f"{path}.name", f"{name!r} must match [a-z0-9-]+")
        if name in RESERVED_BACKEND_NAMES:
            raise self.error(f"{path}.name", f"{name!r} is reserved (the API's name for combined calls)")
        if has_url:
            self.mapping(entry, path, ("name",) + _EXTENDER_KEYS)
            return self.backend(entry, path, name, http=True)
        self.mapping(entry, path, ("name", "policy") + _POLICY_BACKEND_KEYS)
        policy = self.string(entry["policy"], f"{path}.policy")
        if policy not in policies:
            known = ", ".join(sorted(policies)) or "none defined"
            raise self.error(f"{path}.policy", f"unknown policy {policy!r} (policies: {known})")
        return self.backend(entry, path, name, http=False, policy=policy)

    def backend(self, entry: dict, path: str, name: str, http: bool, policy: str = "") -> BackendConfig:
        p = lambda key: f"{path}.{key}"  # noqa: E731
        # A policy backend answers every verb but bind unless told otherwise.
        verb_default = (lambda verb: "") if http else (lambda verb: "" if verb == "bind" else verb)
        url_prefix = ""
        if http:
            url_prefix = self.string(entry.get("urlPrefix"), p("urlPrefix"))
            self.check_url(url_prefix, p("urlPrefix"))
        timeout_raw = entry.get("httpTimeout")
        timeout = 0.0
        if timeout_raw is not None:
            timeout = self.duration(timeout_raw, p("httpTimeout"))
        tls = None
        if http and entry.get("tlsConfig") is not None:
            tls = self.tls(entry["tlsConfig"], p("tlsConfig"))
        return BackendConfig(
            name=name,
            url_prefix=url_prefix,
            policy=policy,
            filter_verb=self.string(entry.get("filterVerb"), p("filterVerb"), verb_default("filter")),
            prioritize_verb=self.string(entry.get("prioritizeVerb"), p("prioritizeVerb"), verb_default("prioritize")),
            preempt_verb=self.string(entry.get("preemptVerb"), p("preemptVerb"), verb_default("preempt")),
            bind_verb=self.string(entry.get("bindVerb"), p("bindVerb"), verb_default("bind")),
            weight=self.integer(entry.get("weight"), p("weight"), 0 if http else 1),
            enable_https=self.boolean(entry.get("enableHTTPS"), p("enableHTTPS")) if http else False,
            tls_config=tls,
            http_timeout=timeout or DEFAULT_HTTP_TIMEOUT,
            http_timeout_raw=timeout_raw or "",
            node_cache_capable=self.boolean(entry.get("nodeCacheCapable"), p("nodeCacheCapable")),
            managed_resources=self.managed_resources(entry.get("managedResources"), p("managedResources")),
            ignorable=self.boolean(entry.get("ignorable"), p("ignorable")),
        )

    def check_url(self, url: str, path: str) -> None:
        # The scheduler does not check urlPrefix and fails every call instead; the proxy would
        # do the same for the whole run, so a start-up error is the kinder answer.
        if not url:
            raise self.error(path, "required (the extender's URL, e.g. http://gpu-ext.kube-system.svc:8888/scheduler)")
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError as exc:
            raise self.error(path, f"invalid URL {url!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not host:
            raise self.error(path, f"{url!r} is not an http:// or https:// URL with a host")

    def tls(self, value: Any, path: str) -> TLSConfig:
        value = self.mapping(value, path, _TLS_KEYS)
        return TLSConfig(
            insecure=self.boolean(value.get("insecure"), f"{path}.insecure"),
            server_name=self.string(value.get("serverName"), f"{path}.serverName"),
            cert_file=self.string(value.get("certFile"), f"{path}.certFile"),
            key_file=self.string(value.get("keyFile"), f"{path}.keyFile"),
            ca_file=self.string(value.get("caFile"), f"{path}.caFile"),
            cert_data=self.base64_bytes(value.get("certData"), f"{path}.certData"),
            key_data=self.base64_bytes(value.get("keyData"), f"{path}.keyData"),
            ca_data=self.base64_bytes(value.get("caData"), f"{path}.caData"),
        )

    def managed_resources(self, value: Any, path: str) -> tuple[ManagedResource, ...]:
        result = []
        for j, item in enumerate(self.sequence(value, path)):
            item = self.mapping(item, f"{path}[{j}]", ("name", "ignoredByScheduler"))
            result.append(ManagedResource(
                name=self.string(item.get("name"), f"{path}[{j}].name"),
                ignored_by_scheduler=self.boolean(item.get("ignoredByScheduler"), f"{path}[{j}].ignoredByScheduler"),
            ))
        return tuple(result)

    def validate_backends(self, backends: tuple[BackendConfig, ...], list_path: str) -> None:
        """kube-scheduler's validateExtenders, first error wins."""
        binder = None
        resources: dict[str, str] = {}
        for i, backend in enumerate(backends):
            path = f"{list_path}[{i}]"
            if backend.prioritize_verb and backend.weight <= 0:
                raise self.error(f"{path}.weight", f"{backend.weight}: must have a positive weight applied to it")
            for j, resource in enumerate(backend.managed_resources):
                rpath = f"{path}.managedResources[{j}].name"
                problem = extended_resource_name_problem(resource.name)
                if problem:
                    raise self.error(rpath, f"{resource.name!r}: {problem}")
                if resource.name in resources:
                    raise self.error(rpath, f"{resource.name!r}: duplicate extender managed resource name "
                                            f"(also {resources[resource.name]})")
                resources[resource.name] = rpath
            if backend.bind_verb:
                if binder is not None:
                    raise self.error(f"{path}.bindVerb", f"only one extender can implement bind ({binder} also sets bindVerb)")
                binder = f"{path}.bindVerb"

    def recording(self, value: Any) -> RecordingConfig:
        value = self.mapping(value, "recording", ("enabled", "queueSize", "batchSize", "flushInterval", "maxBodyBytes"))
        d = RecordingConfig()
        flush = d.flush_interval
        raw = value.get("flushInterval")
        if raw is not None:
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                flush = float(raw)
            else:
                flush = self.duration(raw, "recording.flushInterval")
            if flush <= 0:
                raise self.error("recording.flushInterval", f"must be positive, got {raw!r}")
        return RecordingConfig(
            enabled=self.boolean(value.get("enabled"), "recording.enabled", d.enabled),
            queue_size=self.integer(value.get("queueSize"), "recording.queueSize", d.queue_size, minimum=1),
            batch_size=self.integer(value.get("batchSize"), "recording.batchSize", d.batch_size, minimum=1),
            flush_interval=flush,
            max_body_bytes=self.integer(value.get("maxBodyBytes"), "recording.maxBodyBytes", d.max_body_bytes, minimum=1),
        )

    def redaction(self, value: Any) -> RedactionConfig:
        value = self.mapping(value, "redaction", ("envValues", "dropAnnotations", "redactAnnotations", "redactLabels"))
        d = RedactionConfig()
        return RedactionConfig(
            env_values=self.boolean(value.get("envValues"), "redaction.envValues", d.env_values),
            drop_annotations=self.strings(value.get("dropAnnotations"), "redaction.dropAnnotations", d.drop_annotations),
            redact_annotations=self.strings(value.get("redactAnnotations"), "redaction.redactAnnotations"),
            redact_labels=self.strings(value.get("redactLabels"), "redaction.redactLabels"),
        )

    def retention(self, value: Any) -> RetentionConfig:
        value = self.mapping(value, "retention", ("maxAge", "maxCalls"))
        d = RetentionConfig()
        max_age = d.max_age_seconds
        if value.get("maxAge") is not None:
            max_age = self.duration(value["maxAge"], "retention.maxAge", parse_age)
        return RetentionConfig(
            max_age_seconds=max_age,
            max_calls=self.integer(value.get("maxCalls"), "retention.maxCalls", d.max_calls, minimum=0),
        )


def _join(path: str, key: str) -> str:
    return key if path == "(root)" else f"{path}.{key}"


# --------------------------------------------------------------------------- resource names

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def qualified_name_problem(value: str) -> str | None:
    """apimachinery IsQualifiedName: optional DNS-subdomain prefix, "/", a name part of <= 63."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253:
            return "prefix part must be no more than 253 characters"
        if not _DNS_SUBDOMAIN.fullmatch(prefix):
            return "prefix part must be a lowercase RFC 1123 subdomain"
    else:
        return "a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional DNS subdomain prefix and '/'"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
    return None


def extended_resource_name_problem(name: str) -> str | None:
    """Why `name` is not a valid extended resource name (validateExtendedResourceName), or None."""
    problem = qualified_name_problem(name)
    if problem:
        return problem
    # v1helper.IsExtendedResourceName: not native (needs a domain, and not kubernetes.io/ --
    # upstream checks "contains", which covers *.kubernetes.io too), no requests. prefix, and
    # the quota form "requests.<name>" must still be a qualified name.
    if "/" not in name:
        return "is an invalid extended resource name: it needs a domain prefix, such as example.com/gpu"
    if "kubernetes.io/" in name:
        return "is an invalid extended resource name: the kubernetes.io domain is reserved for native resources"
    if name.startswith("requests."):
        return "is an invalid extended resource name: it must not start with requests."
    if qualified_name_problem("requests." + name):
        return "is an invalid extended resource name: its quota form requests.<name> is too long"
    return None
