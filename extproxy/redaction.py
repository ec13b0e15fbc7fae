"""Removes secrets from Pod and Node objects and from error texts before anything is stored or streamed.

What is redacted is set by `RedactionConfig`:
- container `env[].value`: every one (`envValues`, the default), else those whose name matches
  one of `namePatterns`;
- container `args` and `command`, and the `exec.command` of its probes and lifecycle hooks: the
  value of a flag whose name matches (`--db-password=x`, `--token x`, also inside one argument:
  `sh -c "mysqld --password x"`), and `name=value` / `name: value` text inside an argument
  (`sh -c "PASSWORD=x ..."`);
- the `httpGet.httpHeaders` of probes and lifecycle hooks: the value of a header whose name
  matches, or is Authorization, Proxy-Authorization or Cookie; others as free text;
- volumes' `flexVolume.options` and `csi.volumeAttributes`: the values of keys that match;
- annotations and labels: the values of keys that match, or that are listed by name
  (`redactAnnotations`, `redactLabels`); `dropAnnotations` are removed whole (the default drops
  kubectl's last-applied-configuration, which repeats the spec, env included);
- free text (`redact_text`: error texts, including a backend's non-200 body; a backend's
  FailedNodes reasons and Error; the scheduler's event notes): `name=value`,
  `"name": "value"`, env entries written as JSON, `Bearer`/`Token`/`Basic` credentials, and
  a URL's userinfo secret (its password, or a user name standing alone: `_userinfo`); in a
  reply's structured fields (`redact_free_text`) also the values under keys that name secrets;
- a call's other texts (`Echoes`): the exact values removed from its request, where they are
  repeated (a backend echoing a password in a form no pattern knows);
- bytes that cannot be read as JSON (`redact_raw`: a raw record's bodies, a backend's text
  reply, a reply cut short): the free-text rules, and by pattern what the rules above find in a
  decoded Pod: the values of listed annotation and label keys, every `"value"` string with
  `envValues`, the argument after a secret flag.
Function names here are stable: the recorder calls them. Works on decoded dicts in place; pure, no I/O.
"""
from __future__ import annotations

import json
import re
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit, urlunsplit

import msgspec

from .config import RedactionConfig

REDACTED = "[redacted]"
_JSON = msgspec.json.Decoder()
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_HOOKS = ("postStart", "preStop")
# Headers whose whole value is a credential whatever the name patterns say.
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")


@lru_cache(maxsize=32)
def _names(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One case-insensitive regex that finds any of the patterns (never matches when empty)."""
    return re.compile("|".join(f"(?:{p})" for p in patterns) or r"(?!x)x", re.IGNORECASE)


@lru_cache(maxsize=32)
def _names_bytes(patterns: tuple[str, ...]) -> tuple[re.Pattern[bytes], bool]:
    """The names as a bytes regex, and whether it is to be run over the lowered bytes.

    Python's case-insensitive search of an alternation is slow: ~240 us over a 3.7 kB Pod with
    the default names, against ~30 us for a plain search of the lowered bytes. The two find the
    same for a pattern that has no capital letter and no escape (an escape such as \\S would
    change its meaning if lowered); other patterns keep the case-insensitive search.
    """
    pattern = _names(patterns).pattern
    if pattern == pattern.lower() and "\\" not in pattern:
        return re.compile(pattern.encode()), True
    return re.compile(pattern.encode(), re.IGNORECASE), False


_ENV_JSON = re.compile(r'("name"\s*:\s*"((?:[^"\\]|\\.){0,256})"\s*,\s*"value"\s*:\s*")((?:[^"\\]|\\.)*)(")')
_QUOTED_PAIR = re.compile(r'(["\'])([^"\'\n]{1,256})\1(\s*:\s*)(["\'])((?:[^"\'\\]|\\.)*)\4')
# A scheme word and its credential are apart (`Authorization: Basic <base64>`): without the space
# required, a node named `tokenserver01` or `basic-pool-abcdefgh` was read as a credential.
_CREDENTIAL = re.compile(r"\b((?:Bearer|Token|Basic)\s+|extproxy\.token\.)(?P<v>[A-Za-z0-9._~+/=\-]{8,})", re.IGNORECASE)
# A URL's userinfo in text: `user:password@` (the password is the secret), or a user alone
# (`https://TOKEN@host`, git's way of passing a token: the user is the secret).
_URL_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.\-]*://)([^\s:/@]{0,256})(?::([^\s/@]*))?@", re.IGNORECASE)
# Passwords that say the user is the token (`https://TOKEN:x-oauth-basic@github.com`).
_TOKEN_USER_PASSWORDS = ("x-oauth-basic",)
# The schemes whose user name alone is read as a token: a web URL's (a backend's, a replay
# target's, git's over HTTPS). A database's or ssh's user alone names an account
# (`postgresql://postgres@db/`, `ssh://git@host/`), and is kept.
_TOKEN_USER_SCHEMES = ("http", "https", "ws", "wss")


# --- what redaction removed ------------------------------------------------------------------
# The values replaced while a `collecting()` is open, so that the recorder can remove them from
# the same call's other texts (a backend that echoes a Pod's password in a reason: `Echoes`).
_REMOVED: ContextVar["list[str] | None"] = ContextVar("extproxy_redaction_removed", default=None)


class collecting:
    """`with collecting() as removed:` every value redaction replaces meanwhile is appended to
    `removed` (not to an enclosing collector: a layer that remembers its answers notes them
    there itself, with `noted`, also when it answers from memory)."""

    __slots__ = ("removed", "_token")

    def __enter__(self) -> list[str]:
        self.removed: list[str] = []
        self._token = _REMOVED.set(self.removed)
        return self.removed

    def __exit__(self, *exc: object) -> None:
        _REMOVED.reset(self._token)


def noted(values: Iterable[str]) -> None:
    """`values` counted as replaced by the collector open now (none: nothing happens)."""
    removed = _REMOVED.get()
    if removed is not None and values:
        removed.extend(values)


def _removed(value: Any) -> None:
    if isinstance(value, str) and value and value != REDACTED:
        removed = _REMOVED.get()
        if removed is not None:
            removed.append(value)


def _cut(group: str, note: Callable[[str], Any] = lambda value: value) -> Callable[[re.Match[str]], str]:
    """A re.sub replacement: `group` of the match replaced by REDACTED, and its value noted."""

    def replace(m: re.Match[str]) -> str:
        whole, start = m.group(0), m.start(0)
        value = m.group(group)
        if value != REDACTED:
            _removed(note(value))
        return whole[: m.start(group) - start] + REDACTED + whole[m.end(group) - start:]

    return replace


_CUT = _cut("v")


@lru_cache(maxsize=32)
def _plain_pair(patterns: tuple[str, ...]) -> re.Pattern[str]:
    # password=x, --db-password=x, token: x, X-Api-Key: x (the name's start is left as it is).
    # A value already [redacted] is taken whole, so that redacting again changes nothing (the
    # value's characters stop at `]`: `password=[redacted]` became `password=[redacted]]`).
    return re.compile(
        rf"((?:{_names(patterns).pattern})[\w.\-/]{{0,128}}\s*[=:]\s*)(?P<v>(?:(?:Bearer|Token|Basic)\s+)?(?:{re.escape(REDACTED)}|[^\s\"',;&}}\]]+))",
        re.IGNORECASE,
    )


@lru_cache(maxsize=32)
def _flag_then_word(patterns: tuple[str, ...]) -> re.Pattern[str]:
    # `mysqld --password x` inside one argument (`sh -c "..."`): the word after a secret flag,
    # quoted or not; a following flag is not a value. The runs around the name are bounded: unbounded,
    # `-tokentoken...` took quadratic time (each start scanned to the end), 0.15 s at 8 kB.
    return re.compile(
        rf"((?<![\w\-])-{{1,2}}[\w.\-]{{0,128}}(?:{_names(patterns).pattern})[\w.\-]{{0,128}}[ \t]+)"
        rf"(?P<v>{re.escape(REDACTED)}|'[^'\n]*'|\"[^\"\n]*\"|[^\s\"'`;&|\\\-][^\s\"'`;&|]*)",
        re.IGNORECASE,
    )


def redact_text(text: str, rules: RedactionConfig) -> str:
    """`text` with every secret the rules recognise replaced by [redacted]."""
    if not text:
        return text
    names = _names(rules.name_patterns)

    def env_entry(m: re.Match[str]) -> str:
        if rules.env_values or names.search(m.group(2)):
            if m.group(3) != REDACTED:
                _removed(m.group(3))
            return m.group(1) + REDACTED + m.group(4)
        return m.group(0)

    def quoted_pair(m: re.Match[str]) -> str:
        if names.search(m.group(2)):
            if m.group(5) != REDACTED:
                _removed(m.group(5))
            return m.group(0)[: m.start(5) - m.start(0)] + REDACTED + m.group(4)
        return m.group(0)

    # Each expression is run only where the character it cannot match without is present: most
    # texts (annotation values, arguments) have none, and five case-insensitive passes over
    # each were a tenth of recording a new Pod.
    if '"' in text or "'" in text:
        text = _ENV_JSON.sub(env_entry, text)
        text = _QUOTED_PAIR.sub(quoted_pair, text)
    if "=" in text or ":" in text:
        text = _plain_pair(rules.name_patterns).sub(_CUT, text)
    if "-" in text:
        text = _flag_then_word(rules.name_patterns).sub(_CUT, text)
    text = _CREDENTIAL.sub(_CUT, text)
    if "://" in text:
        text = _URL_USERINFO.sub(_userinfo_redacted, text)
    return text


def _userinfo(scheme: str, user: str, password: str | None) -> str | None:
    """A URL's userinfo as shown (without its "@"), or None when it shows no secret.

    The rule: a password is replaced and its user kept (`user:[redacted]`: Basic auth, the user
    names the account); in a web URL (_TOKEN_USER_SCHEMES), a user without a password, or
    beside an empty one or one that says the user is the token (`x-oauth-basic`), is itself the
    secret and is replaced (`[redacted]`: `https://TOKEN@host/`, as git passes a token)."""
    if password is not None and password and password.lower() not in _TOKEN_USER_PASSWORDS:
        if password == REDACTED:
            return None
        _removed(password)
        return f"{user}:{REDACTED}"
    if not user or user == REDACTED or scheme.lower() not in _TOKEN_USER_SCHEMES:
        return None
    _removed(user)
    return REDACTED if password is None or not password else f"{REDACTED}:{password}"


def _userinfo_redacted(m: re.Match[str]) -> str:
    shown = _userinfo(m.group(1)[:-3], m.group(2), m.group(3))
    return m.group(0) if shown is None else f"{m.group(1)}{shown}@"


def url_without_password(url: str) -> str:
    """`url` with the secret of its userinfo replaced, by `_userinfo`'s rule: its password
    (`http://user:[redacted]@host/`), or a user that stands alone (`https://[redacted]@host/`:
    a token passed as the user name). A backend's urlPrefix and a replay's target may carry
    credentials, and their URLs are shown, audited and copied out. Read as the URL's own parser
    reads it (the userinfo ends at the host's last "@", the user may be empty): a pattern missed
    `http://:token@host/` and cut `user:p@ss@host` after `p`."""
    if "@" not in url:
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for what the parser does not take
    except ValueError:  # not a URL its parser takes: the pattern, at least
        return _URL_USERINFO.sub(_userinfo_redacted, url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    user, colon, password = userinfo.partition(":")
    shown = _userinfo(parts.scheme, user, password if colon else None)
    return url if shown is None else urlunsplit(parts._replace(netloc=f"{shown}@{host}"))


def bounded_text(text: str, rules: RedactionConfig, limit: int, margin: int | None = None,
                 echoes: "Echoes | None" = None) -> str:
    """`text` redacted and cut to `limit` characters. Only `limit + margin` characters (by
    default twice the limit) are redacted: the patterns cost 0.1-0.5 s of CPU a MiB and a
    backend's text has no bound of its own, and past the cut a secret across it is still
    recognised. `echoes`: values removed from the call's request, removed here too."""
    window = limit + (limit if margin is None else margin)
    if echoes is None:
        kept = text[:window]
    else:  # a value that the window's end cuts through is found whole, then cut
        kept = echoes.text(text[: window + echoes.longest])[:window]
    return redact_text(kept, rules)[:limit]


def redact_strings(value: Any, rules: RedactionConfig) -> Any:
    """Every string in a decoded JSON value redacted as free text, whole (a replay's diff, the
    shadow's examples, a stored reply's text fields: each bounded when it was made)."""
    if isinstance(value, str):
        return redact_text(value, rules)
    if isinstance(value, list):
        return [redact_strings(item, rules) for item in value]
    if isinstance(value, dict):
        return {key: redact_strings(item, rules) for key, item in value.items()}
    return value


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


_ANY_VALUE = re.compile(r'("value"\s*:\s*")(?P<v>(?:[^"\\]|\\.)*)(")')
_FLAG_THEN_VALUE = re.compile(r'"(-{1,2}[^"\\=\s]{1,256})"(\s*,\s*")((?:[^"\\]|\\.)*)(")')
RAW_MARK_TEXT = "redacted by pattern: the body could not be read as JSON"


def _json_unescaped(text: str) -> str:
    """A JSON string's content (between its quotes) as the string it stands for; as it is when
    it is not one."""
    if "\\" not in text:
        return text
    try:
        value = _JSON.decode(('"' + text + '"').encode("utf-8", "surrogateescape"))
    except (ValueError, UnicodeError):
        return text
    return value if isinstance(value, str) else text


_CUT_JSON = _cut("v", _json_unescaped)
# Bytes redacted by pattern at most. The free-text patterns take 0.25-0.5 s of CPU a MiB: a
# full-object reply cut short at 64 MiB took the recorder 17 s (2 s with this bound). Beyond
# it, not kept (marked).
RAW_REDACT_MAX = 4 << 20


@lru_cache(maxsize=32)
def _listed_key(names: tuple[str, ...]) -> re.Pattern[str] | None:
    if not names:
        return None
    keys = "|".join(re.escape(name) for name in names)
    return re.compile(rf'("(?:{keys})"\s*:\s*")(?P<v>(?:[^"\\]|\\.)*)(")')


def redact_raw(raw: bytes, rules: RedactionConfig) -> tuple[bytes, list[str]]:
    """Bytes that could not be read as JSON, with what looks like a secret replaced, and a mark
    when anything was (none when nothing was).

    By pattern, so it errs towards redacting more than a decoded Pod would lose (every
    `"value"` string with `envValues`, whatever holds it). Bytes that are not UTF-8 are kept as
    they are around what is replaced. Of bytes that need redacting, only the first
    RAW_REDACT_MAX are kept.
    """
    # Both byte tests: a text reply holding only a credential (`Basic <base64>`) has none of the
    # names needs_redaction looks for.
    if not (needs_redaction(raw, rules) or text_needs_redaction(raw, rules)):
        return raw, []
    marks = [RAW_MARK_TEXT]
    cut = len(raw) > RAW_REDACT_MAX
    if cut:
        marks.append(f"only the first {RAW_REDACT_MAX} of its {len(raw)} bytes are kept: "
                     "the rest is too long to redact by pattern")
        raw = raw[: RAW_REDACT_MAX + _EDGE]  # redacted past the cut, then cut (bounded_text)
    text = raw.decode("utf-8", "surrogateescape")
    out = text
    listed = _listed_key(rules.drop_annotations + rules.redact_annotations + rules.redact_labels)
    if listed is not None:
        out = listed.sub(_CUT_JSON, out)
    if rules.env_values:
        out = _ANY_VALUE.sub(_CUT_JSON, out)
    names = _names(rules.name_patterns)

    def flag_value(m: re.Match[str]) -> str:  # ["--token", "x"]: the value is the next string
        if names.search(m.group(1)):
            if m.group(3) != REDACTED:
                _removed(_json_unescaped(m.group(3)))
            return m.group(0)[: m.start(3) - m.start(0)] + REDACTED + m.group(4)
        return m.group(0)

    out = redact_text(_FLAG_THEN_VALUE.sub(flag_value, out), rules)
    if out == text and not cut:
        return raw, []
    kept = out.encode("utf-8", "surrogateescape")
    return (kept[:RAW_REDACT_MAX] if cut else kept), marks


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


_CREDENTIAL_WORDS = (b"bearer", b"token", b"basic", b"extproxy.token.", b"cookie")


def text_needs_redaction(raw: bytes, rules: RedactionConfig) -> bool:
    """Cheap byte test: False only when `redact_text` would leave every string in `raw` (UTF-8
    text, or JSON holding strings) as it is.

    Each of redact_text's expressions needs something this finds in the bytes: a secret-like
    name (pairs, quoted pairs), a credential word, `://`, or both `name` and `value` (env
    entries). A backslash could hide any of them in JSON (`\\u0074oken`), so it counts too.
    """
    if b"\\" in raw or b"://" in raw:
        return True
    lowered = raw.lower()
    if any(word in lowered for word in _CREDENTIAL_WORDS):
        return True
    if b"name" in lowered and b"value" in lowered:
        return True
    pattern, is_lowered = _names_bytes(rules.name_patterns)
    return pattern.search(lowered if is_lowered else raw) is not None


def needs_redaction(raw: bytes, rules: RedactionConfig) -> bool:
    """Cheap byte test so unchanged Node objects are hashed without a decode/encode.

    Conservative: true whenever a listed name, a secret-like name, or an env list appears
    anywhere in the bytes.
    """
    names = rules.drop_annotations + rules.redact_annotations + rules.redact_labels
    if any(name.encode() in raw for name in names):
        return True
    pattern, lowered = _names_bytes(rules.name_patterns)
    if pattern.search(raw.lower() if lowered else raw):
        return True
    return (b'"env"' in raw or b'"args"' in raw or b'"command"' in raw or b"://" in raw
            or b'"httpHeaders"' in raw)


# --- a request's secrets where the same call's texts repeat them ------------------------------
# A backend can echo a value it was sent in a form no pattern above knows: Go's `%v` of a map
# (`map[PASSWORD:hunter2]`), YAML inside a longer message, a JSON fragment, the bare value. The
# values redaction removed from a call's request are therefore also removed, as they are, from
# that call's stored texts (rows.py: its error, findings, reasons, the reply's free-text fields).
#
# Shorter values are left alone: with `envValues` every env value is redacted, most of them
# words such as `true`, `info`, `WARN` or `8080`, and removing those wherever they occur would
# take words out of every reason. Six characters keep a short password (`hunter2`, `s3cr3t`) and
# leave every value of five characters or fewer (`debug`, `false`, `30000`) in place.
ECHO_MIN_CHARS = 6
# Values kept at most, longest first (the rest are not looked for): the search over a call's
# texts is one expression of them all.
ECHO_MAX_VALUES = 256
# Characters of a value looked for at most (a call's error text is kept to as many): a longer one
# (a certificate) is looked for by its head, and line by line.
ECHO_MAX_CHARS = 16384
ECHO_MARK = " redacted: repeats a value redacted from the request"
_FEW_FORMS = 24  # forms of the values looked for one by one (more: one expression)
_SCHEME_VALUE = re.compile(r"(?:Bearer|Token|Basic)\s+(\S+)$", re.IGNORECASE)
_GO_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _candidates(value: str) -> Iterable[str]:
    """What of a removed value is looked for: the value; unquoted (`--password 'x y'`); the
    credential after its scheme word (a header `Bearer x`); JSON-unescaped; each line of one
    with several (a key's text)."""
    yield value
    bare = value.strip()
    if len(bare) > 1 and bare[0] == bare[-1] and bare[0] in "'\"":
        bare = bare[1:-1]
    yield bare
    scheme = _SCHEME_VALUE.match(bare)
    if scheme:
        yield scheme.group(1)
    if "\\" in bare:
        yield _json_unescaped(bare)
    if "\n" in bare:
        yield from (line.strip() for line in bare.splitlines())


def _escaped(text: str) -> tuple[str, ...]:
    """`text` and the forms a JSON encoder writes it in: escaped (Go's also escapes <, > and &;
    Python's by default every character past ASCII). Lone surrogates (bytes that were not UTF-8)
    are kept as they are."""
    plain = json.dumps(text, ensure_ascii=False)[1:-1]
    go = "".join(_GO_HTML.get(ch, ch) for ch in plain)
    return tuple(dict.fromkeys((text, plain, go, json.dumps(text)[1:-1])))


class Echoes:
    """The values removed from one call's request, found and removed in its other texts."""

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values
        texts = sorted({form for value in values for form in _escaped(value)}, key=len, reverse=True)
        self.longest = max(map(len, texts), default=0)
        # In a JSON body a text is written escaped once more (a JSON fragment inside a reason).
        raw = sorted({form.encode("utf-8", "surrogatepass") for text in texts for form in _escaped(text)},
                     key=len, reverse=True)
        self._text = re.compile("|".join(map(re.escape, texts)))
        # Whether a text holds one: `in` for each of a few (~1 us per 1 kB each); an alternation
        # of many in one expression costs ~20 us per 1 kB whatever their number.
        few = len(raw) <= _FEW_FORMS
        self._texts = tuple(texts) if few else None
        self._raw = tuple(raw) if few else None
        self._bytes = re.compile(b"|".join(map(re.escape, raw)))

    def in_text(self, text: str) -> bool:
        if not text:
            return False
        if self._texts is not None:
            return any(form in text for form in self._texts)
        return self._text.search(text) is not None

    def in_bytes(self, raw: bytes) -> bool:
        """Whether `raw` (UTF-8 text, or JSON holding it) may repeat a value: written plainly or
        escaped as JSON encoders write it. A writer that escapes plain letters (`\\u0068unter2`)
        is not looked through."""
        if not raw:
            return False
        if self._raw is not None:
            return any(form in raw for form in self._raw)
        return self._bytes.search(raw) is not None

    def apart_from(self, names: Iterable[str]) -> "Echoes | None":
        """Without the values that are, or are part of, one of `names`: the names a record keeps
        in the clear (the Pod's name, namespace and UID, the node names) are shown anyway, and a
        node's name in a reason must stay readable."""
        shown = "\n".join(names)
        kept = tuple(value for value in self.values if value not in shown) if shown else self.values
        if kept == self.values:
            return self
        return _echoes(kept) if kept else None

    def text(self, text: str) -> str:
        return self._text.sub(REDACTED, text) if self.in_text(text) else text

    def strings(self, value: Any) -> Any:
        """Every string in a decoded JSON value with the values removed, keys aside."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.strings(item) for item in value]
        if isinstance(value, dict):
            return {key: self.strings(item) for key, item in value.items()}
        return value


@lru_cache(maxsize=256)
def _echoes(values: tuple[str, ...]) -> Echoes:
    return Echoes(values)  # a Pending Pod's every retry removes the same values


def echoes(removed: list[str]) -> Echoes | None:
    """What to remove from a call's texts, given the values removed from its request (a
    `collecting()` list); None when there is nothing (the usual case: costs a test of `removed`)."""
    if not removed:
        return None
    found = _looked_for(tuple(removed))
    return _echoes(found[:ECHO_MAX_VALUES]) if found else None


@lru_cache(maxsize=1024)
def _looked_for(removed: tuple[str, ...]) -> tuple[str, ...]:
    """The candidates of removed values long enough to look for, longest first."""
    found = set()
    for value in set(removed):
        for candidate in _candidates(value):
            if len(candidate) >= ECHO_MIN_CHARS and REDACTED not in candidate and candidate not in REDACTED:
                if len(candidate) <= ECHO_MAX_CHARS:
                    found.add(candidate)
                else:
                    found.add(candidate[:ECHO_MAX_CHARS])  # its head at least (its lines too)
    return tuple(sorted(found, key=lambda value: (-len(value), value)))
