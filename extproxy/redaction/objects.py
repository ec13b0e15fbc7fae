"""Pod and Node objects: what `RedactionConfig` names in them, redacted in place. Pure, no I/O."""
from __future__ import annotations

import re
from typing import Any

from ..config import RedactionConfig
from .text import _CREDENTIAL_HEADERS, REDACTED, _names, _removed, redact_text

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_HOOKS = ("postStart", "preStop")


def redact_object(obj: Any, rules: RedactionConfig) -> Any:
    """Redact one Pod or Node dict in place and return it."""
    if not isinstance(obj, dict):
        return obj
    names = _names(rules.name_patterns)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        _redact_map(metadata, "annotations", rules.drop_annotations, rules.redact_annotations, names, rules)
        _redact_map(metadata, "labels", (), rules.redact_labels, names, rules)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        for key in _CONTAINER_LISTS:
            for container in spec.get(key) or ():
                if isinstance(container, dict):
                    _redact_container(container, rules, names)
        for volume in spec.get("volumes") or ():
            for source, field in (("flexVolume", "options"), ("csi", "volumeAttributes")):
                given = volume.get(source) if isinstance(volume, dict) else None
                if isinstance(given, dict):
                    _redact_map(given, field, (), (), names, rules)
    return obj


def _redact_container(container: dict, rules: RedactionConfig, names: re.Pattern[str]) -> None:
    _redact_env(container.get("env"), rules.env_values, names)
    for field in ("args", "command"):
        if isinstance(container.get(field), list):
            container[field] = redact_args(container[field], rules)
    # Probes and lifecycle hooks run commands and send headers of their own: the same secrets
    # are written there (`mysql --password x` as a postStart hook, `Authorization: Bearer x`).
    handlers = [container.get(probe) for probe in _PROBES]
    lifecycle = container.get("lifecycle")
    if isinstance(lifecycle, dict):
        handlers += [lifecycle.get(hook) for hook in _HOOKS]
    for handler in handlers:
        if not isinstance(handler, dict):
            continue
        run = handler.get("exec")
        if isinstance(run, dict) and isinstance(run.get("command"), list):
            run["command"] = redact_args(run["command"], rules)
        http = handler.get("httpGet")
        if isinstance(http, dict):
            if isinstance(http.get("path"), str):
                http["path"] = redact_text(http["path"], rules)  # /healthz?token=x
            _redact_headers(http.get("httpHeaders"), rules, names)


def _redact_headers(headers: Any, rules: RedactionConfig, names: re.Pattern[str]) -> None:
    for header in headers if isinstance(headers, list) else ():
        if not isinstance(header, dict) or header.get("value") in (None, "") or not isinstance(header["value"], str):
            continue
        name = str(header.get("name") or "")
        if name.lower() in _CREDENTIAL_HEADERS or names.search(name):
            _removed(header["value"])
            header["value"] = REDACTED
        else:
            header["value"] = redact_text(header["value"], rules)


def redact_args(args: list[Any], rules: RedactionConfig) -> list[Any]:
    """A container's args (or command) with secret values replaced."""
    names = _names(rules.name_patterns)
    out: list[Any] = []
    secret_flag = False
    for arg in args:
        if not isinstance(arg, str):
            out.append(arg)
            secret_flag = False
            continue
        if secret_flag and not arg.startswith("-"):
            _removed(arg)
            out.append(REDACTED)  # the value of `--token x`
            secret_flag = False
            continue
        secret_flag = arg.startswith("-") and "=" not in arg and bool(names.search(arg))
        out.append(redact_text(arg, rules))
    return out


def _redact_map(metadata: dict, key: str, drop: tuple[str, ...], redact: tuple[str, ...],
                names: re.Pattern[str], rules: RedactionConfig) -> None:
    values = metadata.get(key)
    if not isinstance(values, dict):
        return
    for name in drop:
        values.pop(name, None)
    for name, value in values.items():
        if name in redact or names.search(name):
            _removed(value)
            values[name] = REDACTED
        elif isinstance(value, str):
            values[name] = redact_text(value, rules)


def _redact_env(env: Any, all_values: bool, names: re.Pattern[str]) -> None:
    for var in env or ():
        # valueFrom only names a Secret or ConfigMap key; the value itself is what leaks.
        if not isinstance(var, dict) or var.get("value") in (None, ""):
            continue
        if all_values or names.search(str(var.get("name") or "")):
            _removed(var["value"])
            var["value"] = REDACTED
