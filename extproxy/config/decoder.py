"""Strict decoding of a parsed configuration file into ProxyConfig, with the scheduler's validation.

Decoding is case-sensitive like kube-scheduler's own config decoder, and the extender list is
validated with the scheduler's ``validateExtenders`` rules, so a file the scheduler would refuse
is refused here too, with the field path and the reason. Policy rule bodies are kept raw;
``extproxy.policies`` validates them.

May import: the standard library and the other ``config`` modules. No Django, no I/O.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from typing import Any, Callable
from urllib.parse import urlsplit

from extproxy.protocol import Verb

from .durations import INT64_MAX, parse_age, parse_go_duration
from .names import BACKEND_NAME_RE, derive_backend_names, extended_resource_name_problem
from .types import (
    DEFAULT_HTTP_TIMEOUT,
    RESERVED_BACKEND_NAMES,
    SCHEDULER_KIND,
    BackendConfig,
    ConfigError,
    ManagedResource,
    ProxyConfig,
    RecordingConfig,
    RedactionConfig,
    RetentionConfig,
    TLSConfig,
)

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
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
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
            shadow_of = self.string(entry.get("shadowOf", ""), f"{path}.shadowOf") if isinstance(entry, dict) else ""
            backend = self.own_backend(entry if not shadow_of else {k: v for k, v in entry.items() if k != "shadowOf"}, path, policies)
            if backend.name in seen:
                raise self.error(f"{path}.name", f"duplicate backend name {backend.name!r} (also {seen[backend.name]})")
            seen[backend.name] = path
            backends.append(dataclasses.replace(backend, shadow_of=shadow_of) if shadow_of else backend)
        shadows = tuple(b for b in backends if b.shadow_of)  # shadow.py: outside the scheduler's chain
        backends = [b for b in backends if not b.shadow_of]
        for shadow in shadows:
            if shadow.shadow_of not in {b.name for b in backends}:
                raise self.error(f"{seen[shadow.name]}.shadowOf", f"no backend {shadow.shadow_of!r} to shadow "
                                 f"(backends that are not shadows: {', '.join(b.name for b in backends) or 'none'})")
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
            shadows=shadows,
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

        def verb_string(verb: Verb) -> str:
            # A policy backend answers every verb but bind unless told otherwise.
            default = "" if http or verb == Verb.BIND else verb.value
            return self.string(entry.get(f"{verb}Verb"), p(f"{verb}Verb"), default)

        verbs: dict[str, Any] = {f"{verb}_verb": verb_string(verb) for verb in Verb}
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
            **verbs,
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
        value = self.mapping(value, "redaction", ("envValues", "dropAnnotations", "redactAnnotations", "redactLabels",
                                                  "namePatterns"))
        d = RedactionConfig()
        patterns = self.strings(value.get("namePatterns"), "redaction.namePatterns", d.name_patterns)
        for i, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise self.error(f"redaction.namePatterns[{i}]", f"not a regular expression: {exc}") from None
        return RedactionConfig(
            env_values=self.boolean(value.get("envValues"), "redaction.envValues", d.env_values),
            drop_annotations=self.strings(value.get("dropAnnotations"), "redaction.dropAnnotations", d.drop_annotations),
            redact_annotations=self.strings(value.get("redactAnnotations"), "redaction.redactAnnotations"),
            redact_labels=self.strings(value.get("redactLabels"), "redaction.redactLabels"),
            name_patterns=patterns,
        )

    def retention(self, value: Any) -> RetentionConfig:
        value = self.mapping(value, "retention", ("maxAge", "maxCalls", "maxBytes", "auditMaxAge"))
        d = RetentionConfig()
        max_age, audit_max_age = d.max_age_seconds, d.audit_max_age_seconds
        if value.get("maxAge") is not None:
            max_age = self.duration(value["maxAge"], "retention.maxAge", parse_age)
        if value.get("auditMaxAge") is not None:
            audit_max_age = self.duration(value["auditMaxAge"], "retention.auditMaxAge", parse_age)
        return RetentionConfig(
            max_age_seconds=max_age,
            max_calls=self.integer(value.get("maxCalls"), "retention.maxCalls", d.max_calls, minimum=0),
            max_bytes=self.size(value.get("maxBytes"), "retention.maxBytes", d.max_bytes),
            audit_max_age_seconds=audit_max_age,
        )

    def size(self, value: Any, path: str, default: int = 0) -> int:
        """Bytes: an integer, or a Kubernetes-style quantity such as "512Mi", "10Gi", "2G"."""
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return self.integer(value, path, default, minimum=0)
        if not isinstance(value, str):
            raise self.error(path, f'expected bytes as an integer or a size such as "10Gi", got {_type_name(value)}')
        match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|K|M|G|T)?", value.strip())
        if match is None:
            raise self.error(path, f'expected a size such as "512Mi", "10Gi" or "2G", got {value!r}')
        return self.integer(int(match.group(1)) * SIZE_UNITS[match.group(2) or ""], path, minimum=0)


SIZE_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
              "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _join(path: str, key: str) -> str:
    return key if path == "(root)" else f"{path}.{key}"


