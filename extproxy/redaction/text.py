"""Free text: the patterns that find a secret in a text, the URL rule, the cheap byte tests, and
the collector of the values redaction removes (`collecting`: the whole package notes into it).
Pure, no I/O."""
from __future__ import annotations

import re
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit, urlunsplit

from ..config import RedactionConfig
from .escapes import has_escape, plain

REDACTED = "[redacted]"
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
    """`text` with every secret the rules recognise replaced by [redacted]. A text quoting JSON
    may write a name with escapes (`"pass\\u0077ord": "x"`): it is read with them read
    (plain), and kept so only when that removed something."""
    if not text:
        return text
    if has_escape(text):
        read = plain(text)
        if read != text:
            redacted = _patterns(read, rules)
            if redacted != read:
                return redacted
    return _patterns(text, rules)


def _patterns(text: str, rules: RedactionConfig) -> str:
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


def bounded_text(text: str, rules: RedactionConfig, limit: int, margin: int | None = None) -> str:
    """`text` redacted and cut to `limit` characters. Only `limit + margin` characters (by
    default twice the limit) are redacted: the patterns cost 0.1-0.5 s of CPU a MiB and a
    backend's text has no bound of its own, and past the cut a secret across it is still
    recognised."""
    return redact_text(text[: limit + (limit if margin is None else margin)], rules)[:limit]


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


_SECRET_FIELDS = re.compile(rb'"(?:env|args|command|httpheaders)"', re.IGNORECASE)  # ASCII case only: bytes


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
    # The keys of the fields redact_object redacts, in any spelling Go's decoder binds to them
    # (Env, ENV: objects.py), written with escapes (a key's \\u0065), or with the two runes
    # Go folds to ASCII (U+017F to s, U+212A to K).
    return bool(b"://" in raw or _SECRET_FIELDS.search(raw) or b"\\u" in raw
                or b"\xc5\xbf" in raw or b"\xe2\x84\xaa" in raw)
