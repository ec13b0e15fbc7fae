"""Pod and Node objects: what `RedactionConfig` names in them, redacted in place. Pure, no I/O.

Fields are found as Go's decoder binds keys to struct fields: by exact name, else by folded
name (``Env``, ``ENV`` and ``env`` are one field; see protocol/kubefields.py). Every spelling
present is redacted: which one a reader keeps (the last, or all merged) does not matter when
none holds the secret any more. A map's keys (labels, annotations, options) are data, matched
as spelled.
"""
from __future__ import annotations

import re
from typing import Any, Iterator

from ..config import RedactionConfig
from ..protocol.gojson import _fold
from .text import _CREDENTIAL_HEADERS, REDACTED, _names, _removed, redact_text

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_HOOKS = ("postStart", "preStop")


def _keys(obj: dict, field: str) -> list[str]:
    """The keys of `obj` Go's decoder binds to struct field `field`: its exact name and every
    key that folds to it. The common object spells each once, exactly: one fold per key."""
    folded = _fold(field)
    return [key for key in obj if key == field or _fold(key) == folded]


def _fields(obj: Any, field: str, kind: type) -> Iterator[Any]:
    """The values of `obj`'s field `field` (every spelling) that are of `kind`. A list field
    holding anything else but null raises TypeError, as Go's decoder refuses it: the recorder
    then stores the call raw, with that reason (recording/rows.py)."""
    if isinstance(obj, dict):
        for key in _keys(obj, field):
            value = obj[key]
            if isinstance(value, kind):
                yield value
            elif kind is list and value is not None:
                raise TypeError(f"{field} is a JSON {type(value).__name__}, not an array")


def redact_object(obj: Any, rules: RedactionConfig) -> Any:
    """Redact one Pod or Node dict in place and return it."""
    if not isinstance(obj, dict):
        return obj
    names = _names(rules.name_patterns)
    for metadata in _fields(obj, "metadata", dict):
        _redact_map(metadata, "annotations", rules.drop_annotations, rules.redact_annotations, names, rules)
        _redact_map(metadata, "labels", (), rules.redact_labels, names, rules)
    for spec in _fields(obj, "spec", dict):
        for key in _CONTAINER_LISTS:
            for containers in _fields(spec, key, list):
                for container in containers:
                    if isinstance(container, dict):
                        _redact_container(container, rules, names)
        for volumes in _fields(spec, "volumes", list):
            for volume in volumes:
                for source, field in (("flexVolume", "options"), ("csi", "volumeAttributes")):
                    for given in _fields(volume, source, dict):
                        _redact_map(given, field, (), (), names, rules)
    return obj


def _redact_container(container: dict, rules: RedactionConfig, names: re.Pattern[str]) -> None:
    for env in _fields(container, "env", list):
        _redact_env(env, rules.env_values, names)
    for field in ("args", "command"):
        _redact_args_of(container, field, rules)
    # Probes and lifecycle hooks run commands and send headers of their own: the same secrets
    # are written there (`mysql --password x` as a postStart hook, `Authorization: Bearer x`).
    handlers = [handler for probe in _PROBES for handler in _fields(container, probe, dict)]
    for lifecycle in _fields(container, "lifecycle", dict):
        handlers += [handler for hook in _HOOKS for handler in _fields(lifecycle, hook, dict)]
    for handler in handlers:
        for run in _fields(handler, "exec", dict):
            _redact_args_of(run, "command", rules)
        for http in _fields(handler, "httpGet", dict):
            for key in _keys(http, "path"):
                if isinstance(http[key], str):
                    http[key] = redact_text(http[key], rules)  # /healthz?token=x
            for headers in _fields(http, "httpHeaders", list):
                _redact_headers(headers, rules, names)


def _redact_args_of(obj: dict, field: str, rules: RedactionConfig) -> None:
    for key in _keys(obj, field):
        if isinstance(obj[key], list):
            obj[key] = redact_args(obj[key], rules)


def _names_of(obj: dict) -> list[str]:
    """Every name an entry (an env var, a header) gives: any spelling of its `name` field."""
    return [str(obj[key] or "") for key in _keys(obj, "name")] or [""]


def _redact_headers(headers: list, rules: RedactionConfig, names: re.Pattern[str]) -> None:
    for header in headers:
        if not isinstance(header, dict):
            continue
        secret = any(name.lower() in _CREDENTIAL_HEADERS or names.search(name) for name in _names_of(header))
        for key in _keys(header, "value"):
            if header[key] in (None, "") or not isinstance(header[key], str):
                continue
            if secret:
                _removed(header[key])
                header[key] = REDACTED
            else:
                header[key] = redact_text(header[key], rules)


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
    for values in _fields(metadata, key, dict):
        for name in drop:
            values.pop(name, None)
        for name, value in values.items():
            if name in redact or names.search(name):
                _removed(value)
                values[name] = REDACTED
            elif isinstance(value, str):
                values[name] = redact_text(value, rules)


def _redact_env(env: list, all_values: bool, names: re.Pattern[str]) -> None:
    for var in env:
        if not isinstance(var, dict):
            continue
        # valueFrom only names a Secret or ConfigMap key; the value itself is what leaks.
        secret = all_values or any(names.search(name) for name in _names_of(var))
        for key in _keys(var, "value"):
            if secret and var[key] not in (None, ""):
                _removed(var[key])
                var[key] = REDACTED
