"""What a replay runs against, as an Engine: the configuration of now, or it with one backend
replaced by another URL or by a policy (configured, or rules given inline).

A target is JSON (it is stored on the ReplayRun and comes from the API and the command):

    {"kind": "configured"}
    {"kind": "url", "url": "http://...", "filterVerb": ..., "prioritizeVerb": ..., "preemptVerb": ...,
     "bindVerb": ..., "nodeCacheCapable": bool, "weight": n, "httpTimeout": "5s", "replaces": "<backend>"}
    {"kind": "policy", "policy": "<configured policy>" | "rules": {...a policy...}, "replaces": ...}

The replacing backend takes the replaced backend's name (so decisions line up backend by
backend) and, for every field the target leaves out, the replaced backend's value; but for a
policy, nodeCacheCapable is false unless the target sets it (a policy needs full Node objects). Fields are
checked by the configuration's own loader (config.parse_config): a bad target is a
TargetError naming the field. The engine records nothing: its recorder keeps the Trace.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import yaml

from ..config import BackendConfig, ConfigError, ProxyConfig, parse_config
from ..policies import PolicyError, parse_policy
from ..recorder import Trace

KINDS = ("configured", "url", "policy")
_URL_KEYS = ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb", "nodeCacheCapable", "weight", "httpTimeout",
             "ignorable", "enableHTTPS")


class TargetError(ValueError):
    pass


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load without aliases: nested aliases expand as the target is stored and audited
    (225 posted bytes became 53 KB, 317 became 4.3 MB; a small file, gigabytes). A policy has
    no use for them."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", self.peek_event().start_mark)
        return super().compose_node(parent, index)


def load_rules(text: str) -> Any:
    """Policy rules given as YAML or JSON text (the dashboard's form, the command's --rules
    file), aliases refused: a TargetError saying why."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise TargetError(f"not YAML or JSON: {exc}") from None


class CaptureRecorder:
    """Stands in for the Recorder in a replay engine: keeps the traces instead of storing them."""

    publisher = None
    keeping = True  # every replayed call's trace is the replay's result

    def __init__(self) -> None:
        self.traces: list[Trace] = []

    def submit(self, trace: Trace) -> bool:
        self.traces.append(trace)
        return True

    def take(self) -> Trace:
        trace = self.traces.pop()
        self.traces.clear()
        return trace


def check(target: dict[str, Any], policies: dict[str, Any], backends: Sequence[str] = ()) -> dict[str, Any]:
    """The target, validated as far as it can be without knowing the call (TargetError).
    `policies`: the configured ones, which a policy target may name; `backends`: the configured
    backends' names, one of which `replaces` must be (none given: known only per call, where the
    runner checks it)."""
    if not isinstance(target, dict) or target.get("kind", "configured") not in KINDS:
        raise TargetError(f"target.kind must be one of {', '.join(KINDS)}")
    target = {"kind": "configured", **target}
    try:  # stored with the run and in the audit trail, shown in answers: UTF-8 must carry it
        json.dumps(target, ensure_ascii=False, allow_nan=False).encode("utf-8")  # NaN: no JSON column takes it
    except UnicodeEncodeError:
        raise TargetError("target: holds text that is not valid Unicode (a lone surrogate such as \\ud800)") from None
    except (TypeError, ValueError) as exc:
        raise TargetError(f"target: not JSON ({exc})") from None
    if "replaces" in target and not isinstance(target["replaces"], str):
        raise TargetError("target.replaces: a backend name")
    if backends and "replaces" in target and target["replaces"] not in backends:
        raise TargetError(f"target.replaces: no backend {target['replaces']!r} (configured: {sorted(backends)})")
    if target["kind"] == "url" and not isinstance(target.get("url"), str):
        raise TargetError("target.url: required for kind url (the extender's urlPrefix)")
    if target["kind"] == "policy" and ("policy" in target) == ("rules" in target):
        raise TargetError("target: kind policy needs either policy (a configured policy's name) or rules")
    if target["kind"] != "configured":
        sample = BackendConfig(name="check", filter_verb="filter", prioritize_verb="prioritize", weight=1)
        try:
            replacing(target, sample, policies)
        except (TypeError, AttributeError, KeyError) as exc:  # not shaped like a target at all
            raise TargetError(f"target: not a valid target ({type(exc).__name__}: {exc})") from None
    return target


def standing_in_for_selected(target: dict[str, Any], selector: dict[str, Any], backends: Sequence[str]) -> dict[str, Any]:
    """A URL target without `replaces`, given with a selection by a configured backend X
    (`filters.backend`): the target with `replaces: X`. Such a selection holds X's own calls,
    which the target stands in for anyway, and the combined calls X took part in, where without
    `replaces` the target stood in for nothing (an error per call with two backends or more):
    the developer replaying "my backend's calls against my new build" means X. A `replaces`
    given is kept; `combined` or a backend no longer configured names none."""
    named = (selector.get("filters") or {}).get("backend")
    if target.get("kind") == "url" and "replaces" not in target and named in backends:
        return {**target, "replaces": named}
    return target


def _camel(config: BackendConfig) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "filterVerb": config.filter_verb,
        "prioritizeVerb": config.prioritize_verb,
        "preemptVerb": config.preempt_verb,
        "bindVerb": config.bind_verb,
        "nodeCacheCapable": config.node_cache_capable,
        "weight": config.weight,
        "ignorable": config.ignorable,
    }
    if config.http_timeout_raw:
        entry["httpTimeout"] = config.http_timeout_raw
    return entry


def replacing(target: dict[str, Any], replaced: BackendConfig, policies: dict[str, Any]) -> tuple[BackendConfig, dict[str, Any]]:
    """The backend that stands in for `replaced`, and the policies it needs."""
    entry: dict[str, Any] = {"name": replaced.name, **_camel(replaced)}
    if target["kind"] == "policy":
        # A policy reads full Node objects: standing in for a nodeCacheCapable extender it gets
        # them (replay converts the request) unless the target asks for names.
        entry["nodeCacheCapable"] = False
    entry.update({k: target[k] for k in _URL_KEYS if k in target})
    file: dict[str, Any] = {"backends": [entry]}
    if target["kind"] == "url":
        entry["urlPrefix"] = target["url"]
    else:
        name = target.get("policy") or "replay-rules"
        if "rules" in target:
            file["policies"] = {name: target["rules"]}
        elif name in policies:
            file["policies"] = {name: policies[name]}
        else:
            raise TargetError(f"target.policy: no policy {name!r} configured (configured: {sorted(policies)})")
        entry["policy"] = name
        entry.pop("enableHTTPS", None)
    try:
        config = parse_config(file, "<replay target>")
        for policy_name, data in config.policies.items():
            parse_policy(policy_name, data)  # the engine parses it again; here for the error
    except ConfigError as exc:
        raise TargetError(str(exc).replace("backends[0].", "target.")) from None
    except PolicyError as exc:
        raise TargetError(f"target.rules: {exc}") from None
    return config.backends[0], config.policies


def base_backend(config: ProxyConfig, name: str, hint: dict[str, Any] | None = None) -> BackendConfig:
    """The configured backend `name`, or one made from what a fixture recorded of it (its URL,
    its verb string, mode and weight; the plain verb names for the other verbs)."""
    found = config.backend(name)
    if found is not None:
        return found
    hint = hint or {}
    verbs = {f"{verb}_verb": verb for verb in ("filter", "prioritize", "preempt", "bind")}
    verb, verb_string, url = hint.get("verb"), hint.get("verb_string"), hint.get("url") or ""
    if verb in ("filter", "prioritize", "preempt", "bind") and verb_string:
        verbs[f"{verb}_verb"] = verb_string
        if url.endswith("/" + verb_string):
            url = url[: -len(verb_string) - 1]
    return BackendConfig(
        name=name,
        url_prefix=url if url.startswith(("http://", "https://")) else "",
        filter_verb=verbs["filter_verb"],
        prioritize_verb=verbs["prioritize_verb"],
        preempt_verb=verbs["preempt_verb"],
        bind_verb=verbs["bind_verb"],
        weight=int(hint.get("weight") or 1),
        node_cache_capable=bool(hint.get("node_cache_capable", False)),
    )
