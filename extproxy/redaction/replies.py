"""A reply's free-text fields: every string as free text, within a budget, and what a key names
as secret in the fields a backend structures itself. Pure, no I/O."""
from __future__ import annotations

from typing import Any, Callable

from ..config import RedactionConfig
from .text import _CREDENTIAL_HEADERS, REDACTED, _names, _removed, bounded_text, redact_text


# Of one free-text field of a body (a reply's Error, its FailedNodes reasons), characters
# redacted at most (three such fields: 3 MiB a body, as RAW_REDACT_MAX bounds raw bytes): a
# backend may fill a 64 MiB reply with reasons that look secret, and the patterns cost 0.1-0.5 s
# a MiB. Past it, what is left of a string is not kept, and says so.
FREE_TEXT_REDACT_MAX = 1 << 20
_EDGE = 256  # redacted beyond the cut, so a secret across it is still recognised


def redact_free_text(value: Any, rules: RedactionConfig, budget: int = FREE_TEXT_REDACT_MAX,
                     node_keys: bool = False) -> Any:
    """A reply's free-text field redacted: every string in it (Error, each reason of
    FailedNodes, any string of a field a backend added), and whatever a key names as secret
    (`_keyed`). At most `budget` characters are redacted by pattern; the rest of each string
    is cut off, with a note of how much. `node_keys`: the field's own keys are node names
    (FailedNodes), not read as names of secrets."""
    left = budget

    def one(text: str) -> str:
        nonlocal left
        if len(text) <= left:
            left -= len(text)
            return redact_text(text, rules)
        kept, left = left, 0
        note = f"[{len(text) - kept} more characters not kept: too long to redact]"
        return f"{bounded_text(text, rules, kept, _EDGE)} {note}" if kept else note

    return _keyed(value, rules, one, not node_keys)


def redact_reply_strings(value: Any, rules: RedactionConfig, node_keys: bool = False) -> Any:
    """redact_free_text without its budget (a stored reply's text fields, bounded when stored)."""
    return _keyed(value, rules, lambda text: redact_text(text, rules), not node_keys)


# A backend's own field can hold a secret under a key that names it ({"Debug": {"token": "x"}},
# {"Authorization": "Bearer x"}), where the text patterns see only the value. As in a Pod's
# annotations: the value of a key that matches the names, or that is a credential header's, is
# replaced whole (every string and number under it); so is the value of an env entry written as
# an object ({"name": "DB_PASSWORD", "value": "x"}: every one with envValues, as in text).
def _keyed(value: Any, rules: RedactionConfig, one: Callable[[str], str], keys: bool = True) -> Any:
    names = _names(rules.name_patterns)

    def secret_key(key: Any) -> bool:
        return isinstance(key, str) and (key.lower() in _CREDENTIAL_HEADERS or names.search(key) is not None)

    def walk(item: Any, keys: bool = True) -> Any:
        if isinstance(item, str):
            return one(item)
        if isinstance(item, list):
            return [walk(each) for each in item]
        if isinstance(item, dict):
            if keys and isinstance(item.get("name"), str) and isinstance(item.get("value"), str) and (
                    rules.env_values or names.search(item["name"])):
                item = dict(item, value=_all_secret(item["value"]))
            return {key: _all_secret(each) if keys and secret_key(key) else walk(each) for key, each in item.items()}
        return item

    return walk(value, keys)


def _all_secret(item: Any) -> Any:
    """Every string (but empty) and number in `item` replaced: it is under a secret's name."""
    if isinstance(item, str):
        if item and item != REDACTED:
            _removed(item)
            return REDACTED
        return item
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return REDACTED
    if isinstance(item, list):
        return [_all_secret(each) for each in item]
    if isinstance(item, dict):
        return {key: _all_secret(each) for key, each in item.items()}
    return item
