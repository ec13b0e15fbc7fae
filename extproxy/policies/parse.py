"""Policy mapping (from extproxy's YAML config) -> :class:`Policy`, with errors.

Accepted keys: ``bind`` (bool, default false) and ``rules`` (list). Each
rule is a mapping with ``kind`` and the options of that kind (see the
package docstring); unknown keys are errors. CEL expressions are compiled
here, once. Every problem raises :class:`PolicyError` whose ``field`` is the
path inside the policy, e.g. ``rules[2].expression``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from .cel import CelCompileError, compile_expression
from .errors import PolicyError
from .policy import Policy
from .resources import is_extended_resource
from .rules import (
    AvoidTaints,
    CelFilter,
    CelScore,
    FilterRule,
    LeastAllocated,
    PreferredLabel,
    PreferredLabels,
    RequiredLabels,
    ResourceFit,
    ScoreRule,
    Spread,
)
from .selector import Requirement, parse_selector, valid_label_key, valid_label_value

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _bool(rule: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = rule.get(key, default)
    if not isinstance(value, bool):
        raise PolicyError(f"{path}.{key}", "must be true or false")
    return value


def _str(rule: Mapping[str, Any], key: str, path: str, required: bool = True, default: str = "") -> str:
    if key not in rule:
        if required:
            raise PolicyError(f"{path}.{key}", "is required")
        return default
    value = rule[key]
    if not isinstance(value, str) or not value.strip():
        raise PolicyError(f"{path}.{key}", "must be a non-empty string")
    return value


def _weight(rule: Mapping[str, Any], path: str, key: str = "weight") -> float:
    value = rule.get(key, 1)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise PolicyError(f"{path}.{key}", "must be a number greater than 0")
    return float(value)


def _label_key(key: Any, field: str) -> str:
    if not isinstance(key, str) or not valid_label_key(key):
        raise PolicyError(field, f"invalid label key {key!r}")
    return key


def _label_map(rule: Mapping[str, Any], key: str, path: str, values_are_keys: bool = False) -> dict[str, str]:
    raw = rule.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise PolicyError(f"{path}.{key}", "must be a mapping of label key to value")
    out: dict[str, str] = {}
    for k, v in raw.items():
        field = f"{path}.{key}.{k}"
        _label_key(k, field)
        if isinstance(v, bool) or v is None or not isinstance(v, (str, int)):
            raise PolicyError(field, "must be a string")
        v = str(v)
        if values_are_keys:
            _label_key(v, field)
        elif not valid_label_value(v):
            raise PolicyError(field, f"invalid label value {v!r}")
        out[k] = v
    return out


def _cel(rule: Mapping[str, Any], path: str):
    text = _str(rule, "expression", path)
    try:
        return compile_expression(text)
    except CelCompileError as exc:
        raise PolicyError(f"{path}.expression", str(exc)) from None


def _required_labels(rule: Mapping[str, Any], path: str) -> RequiredLabels:
    labels = _label_map(rule, "labels", path)
    from_pod = _label_map(rule, "fromPodLabel", path, values_are_keys=True)
    selector_text = rule.get("selector")
    selector: tuple[Requirement, ...] = ()
    if selector_text is not None:
        try:
            selector = parse_selector(selector_text)
        except ValueError as exc:
            raise PolicyError(f"{path}.selector", str(exc)) from None
    if not labels and not from_pod and not selector:
        raise PolicyError(path, "needs at least one of labels, fromPodLabel, selector")
    return RequiredLabels(labels, from_pod, selector, _bool(rule, "unresolvable", path, True))


def _avoid_taints(rule: Mapping[str, Any], path: str) -> AvoidTaints:
    effects = rule.get("effects", ["NoSchedule", "NoExecute"])
    if not isinstance(effects, list) or not effects:
        raise PolicyError(f"{path}.effects", "must be a non-empty list")
    for i, e in enumerate(effects):
        if e not in TAINT_EFFECTS:
            raise PolicyError(f"{path}.effects[{i}]", f"must be one of {', '.join(TAINT_EFFECTS)}")
    return AvoidTaints(frozenset(effects), _bool(rule, "unresolvable", path, True))


def _resource_list(rule: Mapping[str, Any], path: str, extended_only: bool) -> tuple[str, ...]:
    raw = rule.get("resources")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PolicyError(f"{path}.resources", "must be a list of resource names")
    for i, r in enumerate(raw):
        if not isinstance(r, str) or not r:
            raise PolicyError(f"{path}.resources[{i}]", "must be a resource name")
        if extended_only and not is_extended_resource(r):
            raise PolicyError(f"{path}.resources[{i}]", f"{r} is not an extended resource (domain/name)")
    return tuple(raw)


def _resource_fit(rule: Mapping[str, Any], path: str) -> ResourceFit:
    return ResourceFit(_resource_list(rule, path, extended_only=False))


def _least_allocated(rule: Mapping[str, Any], path: str) -> LeastAllocated:
    return LeastAllocated(_resource_list(rule, path, extended_only=False), _weight(rule, path))


def _cel_filter(rule: Mapping[str, Any], path: str) -> CelFilter:
    program = _cel(rule, path)
    reason = _str(rule, "reason", path, required=False, default="node(s) failed policy expression")
    if "%" in reason:
        raise PolicyError(f"{path}.reason", "must not contain '%' (the scheduler formats it)")
    return CelFilter(program, reason, _bool(rule, "unresolvable", path, True))


def _cel_score(rule: Mapping[str, Any], path: str) -> CelScore:
    return CelScore(_cel(rule, path), _weight(rule, path))


def _preferred_labels(rule: Mapping[str, Any], path: str) -> PreferredLabels:
    raw = rule.get("labels")
    if not isinstance(raw, list) or not raw:
        raise PolicyError(f"{path}.labels", "must be a non-empty list of {key, value, weight}")
    items = []
    for i, item in enumerate(raw):
        ipath = f"{path}.labels[{i}]"
        if not isinstance(item, dict):
            raise PolicyError(ipath, "must be a mapping with key, optional value and weight")
        unknown = set(item) - {"key", "value", "weight"}
        if unknown:
            raise PolicyError(f"{ipath}.{sorted(unknown)[0]}", "unknown option")
        key = _label_key(item.get("key"), f"{ipath}.key")
        value = item.get("value")
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (str, int)) or not valid_label_value(str(value)):
                raise PolicyError(f"{ipath}.value", "must be a label value")
            value = str(value)
        items.append(PreferredLabel(key, value, _weight(item, ipath)))
    return PreferredLabels(tuple(items), _weight(rule, path, "ruleWeight"))


def _spread(rule: Mapping[str, Any], path: str) -> Spread:
    key = _label_key(_str(rule, "topologyKey", path), f"{path}.topologyKey")
    match = _label_map(rule, "matchLabels", path) if "matchLabels" in rule else None
    return Spread(key, match, _weight(rule, path))


_KINDS: dict[str, tuple[Callable[[Mapping[str, Any], str], FilterRule | ScoreRule], set[str]]] = {
    "requiredLabels": (_required_labels, {"labels", "fromPodLabel", "selector", "unresolvable"}),
    "avoidTaints": (_avoid_taints, {"effects", "unresolvable"}),
    "resourceFit": (_resource_fit, {"resources"}),
    "celFilter": (_cel_filter, {"expression", "reason", "unresolvable"}),
    "preferredLabels": (_preferred_labels, {"labels", "ruleWeight"}),
    "spread": (_spread, {"topologyKey", "matchLabels", "weight"}),
    "leastAllocated": (_least_allocated, {"resources", "weight"}),
    "celScore": (_cel_score, {"expression", "weight"}),
}


def parse_policy(name: str, data: dict) -> Policy:
    """Validate a policy mapping and build the :class:`Policy` (CEL compiled once)."""
    if not isinstance(name, str) or not name:
        raise PolicyError("name", "must be a non-empty string")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError("policy", "must be a mapping")
    unknown = set(data) - {"bind", "rules", "description"}
    if unknown:
        raise PolicyError(sorted(unknown)[0], "unknown option (expected bind, rules)")
    binds = data.get("bind", False)
    if not isinstance(binds, bool):
        raise PolicyError("bind", "must be true or false")
    rules = data.get("rules", [])
    if rules is None:
        rules = []
    if not isinstance(rules, list):
        raise PolicyError("rules", "must be a list")
    filters: list[FilterRule] = []
    scores: list[ScoreRule] = []
    for i, rule in enumerate(rules):
        path = f"rules[{i}]"
        if not isinstance(rule, dict):
            raise PolicyError(path, "must be a mapping with a kind")
        kind = rule.get("kind")
        if kind not in _KINDS:
            raise PolicyError(f"{path}.kind", f"must be one of {', '.join(_KINDS)}")
        builder, allowed = _KINDS[kind]
        extra = set(rule) - allowed - {"kind"}
        if extra:
            raise PolicyError(f"{path}.{sorted(extra)[0]}", f"unknown option for {kind}")
        built = builder(rule, path)
        if isinstance(built, FilterRule):
            filters.append(built)
        else:
            scores.append(built)
    return Policy(name, filters, scores, binds=binds)


def default_policy() -> Policy:
    """The policy used when no config file is given; works on any cluster.

    * ``avoidTaints`` NoSchedule + NoExecute (unresolvable),
    * ``resourceFit`` for every extended resource the pod requests,
    * ``leastAllocated``: prefer nodes with more of those resources free
      (after the ledger), or with fewer recorded pods when the pod requests
      no extended resource. ``bind`` is false.
    """
    return parse_policy(
        "default",
        {
            "bind": False,
            "rules": [
                {"kind": "avoidTaints", "effects": ["NoSchedule", "NoExecute"]},
                {"kind": "resourceFit"},
                {"kind": "leastAllocated"},
            ],
        },
    )
