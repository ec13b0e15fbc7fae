"""Removes secrets from Pod and Node objects before anything is stored or streamed.

Pod specs can hold secrets in container `env[].value`; annotations such as
kubectl.kubernetes.io/last-applied-configuration repeat the whole spec, env included. What is
redacted is set by `RedactionConfig`. Works on decoded dicts in place; pure, no I/O.
"""
from __future__ import annotations

from typing import Any

from .config import RedactionConfig

REDACTED = "[redacted]"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def redact_object(obj: Any, rules: RedactionConfig) -> Any:
    """Redact one Pod or Node dict in place and return it."""
    if not isinstance(obj, dict):
        return obj
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        _redact_map(metadata, "annotations", rules.drop_annotations, rules.redact_annotations)
        _redact_map(metadata, "labels", (), rules.redact_labels)
    spec = obj.get("spec")
    if rules.env_values and isinstance(spec, dict):
        for key in _CONTAINER_LISTS:
            for container in spec.get(key) or ():
                if isinstance(container, dict):
                    _redact_env(container.get("env"))
    return obj


def _redact_map(metadata: dict, key: str, drop: tuple[str, ...], redact: tuple[str, ...]) -> None:
    values = metadata.get(key)
    if not isinstance(values, dict):
        return
    for name in drop:
        values.pop(name, None)
    for name in redact:
        if name in values:
            values[name] = REDACTED


def _redact_env(env: Any) -> None:
    for var in env or ():
        # valueFrom only names a Secret or ConfigMap key; the value itself is what leaks.
        if isinstance(var, dict) and var.get("value") not in (None, ""):
            var["value"] = REDACTED


def needs_redaction(raw: bytes, rules: RedactionConfig) -> bool:
    """Cheap byte test so unchanged Node objects are hashed without a decode/encode."""
    names = rules.drop_annotations + rules.redact_annotations + rules.redact_labels
    if any(name.encode() in raw for name in names):
        return True
    return rules.env_values and b'"env"' in raw
