"""Label-selector strings (the ``selector`` of a ``requiredLabels`` rule).

Syntax is the Kubernetes set-based selector syntax: requirements separated
by commas, all of which must hold:

* ``key=value``, ``key==value`` - label present with that value
* ``key!=value`` - label absent, or present with another value
* ``key in (a,b)`` - label present with one of the values
* ``key notin (a,b)`` - label absent, or present with none of the values
* ``key`` - label exists; ``!key`` - label does not exist
* extension: ``key>N`` / ``key<N`` (also ``>=`` / ``<=``) - label present and
  its value, read as an integer, compares so with the integer N; a value
  that is not an integer does not match. (Kubernetes has Gt/Lt only in
  node-affinity expressions, not in selector strings.)

:func:`parse_selector` raises ``ValueError`` with a short explanation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
KEY_RE = re.compile(rf"^(?:{_PREFIX}/)?{_NAME}$")
VALUE_RE = re.compile(rf"^(?:{_NAME})?$")

_TOKEN_RE = re.compile(
    r"\s*(?:(?P<op>==|!=|>=|<=|=|>|<|!|\(|\)|,)|(?P<word>[^\s=!<>(),]+))"
)


def valid_label_key(key: str) -> bool:
    """True if ``key`` is a syntactically valid label key (optional prefix/name)."""
    return bool(KEY_RE.match(key)) and len(key.split("/", 1)[0]) <= 253


def valid_label_value(value: str) -> bool:
    """True if ``value`` is a valid label value (may be empty)."""
    return bool(VALUE_RE.match(value))


@dataclass(frozen=True)
class Requirement:
    """One selector requirement; ``op`` is one of =, !=, in, notin, exists, !, >, <, >=, <=."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        value = labels.get(self.key)
        if op == "=":
            return value == self.values[0]
        if op == "!=":
            return value != self.values[0]
        if op == "in":
            return value is not None and value in self.values
        if op == "notin":
            return value not in self.values
        if value is None:
            return False
        try:
            have = int(value)
        except ValueError:
            return False
        want = int(self.values[0])
        if op == ">":
            return have > want
        if op == "<":
            return have < want
        if op == ">=":
            return have >= want
        return have <= want  # "<="

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!":
            return f"!{self.key}"
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        return f"{self.key}{self.op}{self.values[0]}"


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"unexpected character at position {pos}")
        if m.group("op"):
            out.append(("op", m.group("op")))
        else:
            out.append(("word", m.group("word")))
        pos = m.end()
    return out


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a selector string into requirements (all must match)."""
    if not isinstance(text, str):
        raise ValueError("must be a string")
    toks = _tokens(text)
    if not toks:
        raise ValueError("is empty")
    reqs: list[Requirement] = []
    i = 0

    def expect_key(tok: tuple[str, str] | None) -> str:
        if tok is None or tok[0] != "word":
            raise ValueError("expected a label key")
        if not valid_label_key(tok[1]):
            raise ValueError(f"invalid label key {tok[1]!r}")
        return tok[1]

    def at(j: int) -> tuple[str, str] | None:
        return toks[j] if j < len(toks) else None

    while True:
        tok = at(i)
        if tok == ("op", "!"):
            key = expect_key(at(i + 1))
            reqs.append(Requirement(key, "!"))
            i += 2
        else:
            key = expect_key(tok)
            i += 1
            nxt = at(i)
            if nxt is None or nxt == ("op", ","):
                reqs.append(Requirement(key, "exists"))
            elif nxt[0] == "word" and nxt[1] in ("in", "notin"):
                if at(i + 1) != ("op", "("):
                    raise ValueError(f"expected '(' after {nxt[1]}")
                i += 2
                values: list[str] = []
                while True:
                    t = at(i)
                    if t is not None and t[0] == "word":
                        if not valid_label_value(t[1]):
                            raise ValueError(f"invalid label value {t[1]!r}")
                        values.append(t[1])
                        i += 1
                        t = at(i)
                    if t == ("op", ","):
                        i += 1
                        continue
                    if t == ("op", ")"):
                        i += 1
                        break
                    raise ValueError("unterminated value list")
                if not values:
                    raise ValueError(f"empty value list for {key}")
                reqs.append(Requirement(key, nxt[1], tuple(values)))
            elif nxt[0] == "op" and nxt[1] in ("=", "==", "!=", ">", "<", ">=", "<="):
                val_tok = at(i + 1)
                value = val_tok[1] if val_tok is not None and val_tok[0] == "word" else ""
                if val_tok is not None and val_tok[0] == "word":
                    i += 2
                else:
                    i += 1
                op = "=" if nxt[1] == "==" else nxt[1]
                if op in (">", "<", ">=", "<="):
                    try:
                        int(value)
                    except ValueError:
                        raise ValueError(f"{key}{op} needs an integer, got {value!r}") from None
                elif not valid_label_value(value):
                    raise ValueError(f"invalid label value {value!r}")
                reqs.append(Requirement(key, op, (value,)))
            else:
                raise ValueError(f"unexpected {nxt[1]!r} after {key}")
        tok = at(i)
        if tok is None:
            break
        if tok != ("op", ","):
            raise ValueError(f"expected ',' but found {tok[1]!r}")
        i += 1
        if at(i) is None:
            raise ValueError("trailing ','")
    return tuple(reqs)
