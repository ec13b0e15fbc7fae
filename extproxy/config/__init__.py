"""The backend configuration file: loading, decoding and validation, into one immutable ProxyConfig.

A change to what the file may say goes here. Pure Python: no Django import, and no I/O beyond
reading the one file (``loader.load_config``), so replay, management commands and tests can use
it anywhere (tests/config/test_purity.py proves it).

* ``types``: ProxyConfig and its parts;
* ``loader``: the file kinds, reading and strict YAML/JSON parsing;
* ``decoder``: field-by-field decoding with the scheduler's validation;
* ``durations``: Go durations and ages;
* ``names``: backend names from urlPrefix, Kubernetes resource names.

May import: the standard library, PyYAML and ``extproxy.protocol``. The public names are
exported here.
"""
from __future__ import annotations

from .durations import parse_age, parse_go_duration
from .loader import default_config, load_config, parse_config
from .names import (
    BACKEND_NAME_RE,
    derive_backend_name,
    derive_backend_names,
    extended_resource_name_problem,
    qualified_name_problem,
)
from .types import (
    DEFAULT_HTTP_TIMEOUT,
    EXTPROXY_KIND,
    RESERVED_BACKEND_NAMES,
    SCHEDULER_API_GROUP,
    SCHEDULER_KIND,
    SUPPORTED_API_VERSIONS,
    BackendConfig,
    ConfigError,
    ManagedResource,
    ProxyConfig,
    RecordingConfig,
    RedactionConfig,
    RetentionConfig,
    TLSConfig,
)

__all__ = [
    "BACKEND_NAME_RE",
    "DEFAULT_HTTP_TIMEOUT",
    "EXTPROXY_KIND",
    "RESERVED_BACKEND_NAMES",
    "SCHEDULER_API_GROUP",
    "SCHEDULER_KIND",
    "SUPPORTED_API_VERSIONS",
    "BackendConfig",
    "ConfigError",
    "ManagedResource",
    "ProxyConfig",
    "RecordingConfig",
    "RedactionConfig",
    "RetentionConfig",
    "TLSConfig",
    "default_config",
    "derive_backend_name",
    "derive_backend_names",
    "extended_resource_name_problem",
    "load_config",
    "parse_age",
    "parse_config",
    "parse_go_duration",
    "qualified_name_problem",
]
