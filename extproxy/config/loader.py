"""Loading the backend configuration file that ``EXTPROXY_CONFIG`` names.

Owns the two file kinds (a KubeSchedulerConfiguration, whose ``extenders`` become the backends,
or extproxy's own file), reading the one file and parsing its YAML or JSON strictly (duplicate
keys refused), then handing it to ``decoder``.

May import: the standard library, PyYAML and the other ``config`` modules. No Django; the only
I/O is reading the one file in ``load_config``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .decoder import _Decoder, _type_name
from .types import (
    EXTPROXY_KIND,
    SCHEDULER_KIND,
    SUPPORTED_API_VERSIONS,
    BackendConfig,
    ConfigError,
    ProxyConfig,
)

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

