"""The configuration's types: what a loaded file becomes (immutable dataclasses).

Owns ProxyConfig and its parts (backends with their TLS and managed resources, recording,
redaction, retention) and the facts about a backend that every other module asks
(``verb_string``, ``url_for``, ``interested_in``).

May import: the standard library and ``extproxy.protocol``. No Django, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extproxy.protocol import Verb

SCHEDULER_KIND = "KubeSchedulerConfiguration"
EXTPROXY_KIND = "ExtproxyConfiguration"
SCHEDULER_API_GROUP = "kubescheduler.config.k8s.io"
SUPPORTED_API_VERSIONS = tuple(f"{SCHEDULER_API_GROUP}/{v}" for v in ("v1", "v1beta3", "v1beta2"))
DEFAULT_HTTP_TIMEOUT = 5.0  # DefaultExtenderTimeout, substituted at run time for 0/unset
RESERVED_BACKEND_NAMES = frozenset({"combined"})  # the API's name for combined calls


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


# Each verb's field name, looked up on every call (formatting an enum member is slow).
_VERB_FIELDS = {verb: f"{verb.value}_verb" for verb in Verb}


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
    shadow_of: str = ""  # a shadow of that backend: gets a copy of its calls, never the scheduler's (shadow.py)

    @classmethod
    def as_recorded(
        cls, name: str, target: str, verb: Verb, verb_string: str, *, node_cache_capable: bool = False, weight: int = 0
    ) -> BackendConfig:
        """The backend as a recorded call describes it: enough for the judges to read its reply."""
        policy = target[len("policy:"):] if target.startswith("policy:") else ""
        verbs: dict[str, Any] = {f"{verb}_verb": verb_string or verb.value}
        return cls(name=name, url_prefix="" if policy else target, policy=policy,
                   node_cache_capable=node_cache_capable, weight=weight, **verbs)

    @property
    def is_policy(self) -> bool:
        return bool(self.policy)

    @property
    def target(self) -> str:
        """Where calls go, and the backend's name in the scheduler's messages: its urlPrefix, or policy:<name>."""
        return self.url_prefix or f"policy:{self.policy}"

    def verb_string(self, verb: Verb) -> str:
        """The configured verb string for ``verb`` ("" = unsupported)."""
        return getattr(self, _VERB_FIELDS[verb])

    def verb_name(self, verb_string: str) -> Verb | None:
        if not verb_string:
            return None
        for verb in Verb:
            if self.verb_string(verb) == verb_string:
                return verb
        return None

    def url_for(self, verb_string: str) -> str:
        # Exactly as HTTPExtender.send builds it: no escaping, no trailing slash.
        return self.target.rstrip("/") + "/" + verb_string

    def interested_in(self, pod: Any) -> bool:
        """No managedResources, or a container or init container requests or limits one.

        Any JSON shape: a pod comes from a request anyone who reaches the extender endpoint can
        send (and from stored records). A part of another type than the object or list Go
        decodes there requests nothing; it never raises."""
        if not self.managed_resources:
            return True
        managed = {r.name for r in self.managed_resources}
        spec = _member(pod, "spec")
        for key in ("containers", "initContainers"):
            containers = _member(spec, key)
            for container in containers if isinstance(containers, list) else ():
                resources = _member(container, "resources")
                for kind in ("requests", "limits"):
                    amounts = _member(resources, kind)
                    if isinstance(amounts, dict) and managed.intersection(amounts):
                        return True
        return False


def _member(value: Any, name: str) -> Any:
    """`value[name]` when value is a JSON object, else None."""
    return value.get(name) if isinstance(value, dict) else None


@dataclass(frozen=True)
class RecordingConfig:
    enabled: bool = True
    queue_size: int = 10000
    batch_size: int = 500
    flush_interval: float = 0.1
    max_body_bytes: int = 64 * 1024 * 1024


# Names that say "this holds a secret" (regular expressions, searched case-insensitively) in env
# variable names, container argument flags, annotation and label keys, and key=value text.
SECRET_NAME_PATTERNS: tuple[str, ...] = (
    r"passw(or)?d", r"secret", r"token", r"api[-_.]?key", r"private[-_.]?key",
    r"access[-_.]?key", r"credential", r"authorization", r"bearer", r"connection[-_.]?string",
    r"database[-_.]?url", r"dsn", r"session[-_.]?(id|key)",
)


@dataclass(frozen=True)
class RedactionConfig:
    env_values: bool = True
    drop_annotations: tuple[str, ...] = ("kubectl.kubernetes.io/last-applied-configuration",)
    redact_annotations: tuple[str, ...] = ()
    redact_labels: tuple[str, ...] = ()
    name_patterns: tuple[str, ...] = SECRET_NAME_PATTERNS


@dataclass(frozen=True)
class RetentionConfig:
    max_age_seconds: float = 7 * 86400  # 0 = no age limit
    max_calls: int = 0  # 0 = unlimited
    max_bytes: int = 0  # stored bodies, decisions and Node objects; 0 = unlimited
    audit_max_age_seconds: float = 400 * 86400  # the audit trail's own retention; 0 = keep forever


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
    shadows: tuple[BackendConfig, ...] = ()  # backends with shadowOf: outside the scheduler's chain

    def backend(self, name: str) -> BackendConfig | None:
        for backend in self.backends:
            if backend.name == name:
                return backend
        return None

