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
  repeated (a backend echoing a password in a form no pattern knows), also written with JSON or
  URL escapes;
- bytes that cannot be read as JSON (`redact_raw`: a raw record's bodies, a backend's text
  reply, a reply cut short): the free-text rules, and by pattern what the rules above find in a
  decoded Pod: the values of listed annotation and label keys, every `"value"` string with
  `envValues`, the argument after a secret flag.
Pod fields are found in every spelling Go's decoder binds to them (`Env`, `ENV`: objects.py).
Function names here are stable: the recorder calls them. Works on decoded dicts in place; pure, no I/O.

Modules (each imports only those above it): `escapes` (JSON's `\\uXXXX` and `\\/`, and a
URL's `%XX`, read as characters: for the patterns, JSON's only, and the search of echoes), `text` (free text, URLs, the byte tests, the
collector of removed values), `objects` (Pods and Nodes), `replies` (a reply's text fields),
`raw` (bytes not read as JSON), `echoes` (a request's removed values in the call's other texts).
"""
from __future__ import annotations

from .text import (REDACTED, bounded_text, collecting, needs_redaction, noted, redact_strings, redact_text,
                   text_needs_redaction, url_without_password)
from .objects import redact_args, redact_object
from .replies import FREE_TEXT_REDACT_MAX, redact_free_text, redact_reply_strings
from .raw import RAW_MARK_TEXT, RAW_REDACT_MAX, redact_raw
from .echoes import ECHO_MARK, ECHO_MAX_CHARS, ECHO_MAX_VALUES, ECHO_MIN_CHARS, Echoes, echo_redactor, echoes

__all__ = [
    "ECHO_MARK", "ECHO_MAX_CHARS", "ECHO_MAX_VALUES", "ECHO_MIN_CHARS", "Echoes", "FREE_TEXT_REDACT_MAX",
    "RAW_MARK_TEXT", "RAW_REDACT_MAX", "REDACTED", "bounded_text", "collecting", "echo_redactor", "echoes",
    "needs_redaction", "noted", "redact_args", "redact_free_text", "redact_object", "redact_raw",
    "redact_reply_strings", "redact_strings", "redact_text", "text_needs_redaction", "url_without_password",
]
