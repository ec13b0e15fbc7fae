"""Names: backend names derived from urlPrefix, and Kubernetes resource-name validation.

May import: the standard library and ``config.types``. No Django, no I/O.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from .types import RESERVED_BACKEND_NAMES

_NOT_NAME_CHARS = re.compile(r"[^a-z0-9]+")
BACKEND_NAME_RE = re.compile(r"[a-z0-9-]+")


def derive_backend_name(url_prefix: str) -> str:
    """First host label plus each path segment, joined by "-", reduced to [a-z0-9-]."""
    try:
        parts = urlsplit(url_prefix.strip())
        host = parts.hostname or ""
        path = parts.path
    except ValueError:
        host, path = "", url_prefix
    pieces = [host.split(".", 1)[0]] + [seg for seg in path.split("/") if seg]
    name = _NOT_NAME_CHARS.sub("-", "-".join(pieces).lower()).strip("-")
    return name or "extender"


def derive_backend_names(url_prefixes: list[str]) -> list[str]:
    taken: set[str] = set(RESERVED_BACKEND_NAMES)
    names = []
    for prefix in url_prefixes:
        base = name = derive_backend_name(prefix)
        n = 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        names.append(name)
    return names



_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def qualified_name_problem(value: str) -> str | None:
    """apimachinery IsQualifiedName: optional DNS-subdomain prefix, "/", a name part of <= 63."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253:
            return "prefix part must be no more than 253 characters"
        if not _DNS_SUBDOMAIN.fullmatch(prefix):
            return "prefix part must be a lowercase RFC 1123 subdomain"
    else:
        return "a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional DNS subdomain prefix and '/'"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
    return None


def extended_resource_name_problem(name: str) -> str | None:
    """Why `name` is not a valid extended resource name (validateExtendedResourceName), or None."""
    problem = qualified_name_problem(name)
    if problem:
        return problem
    # v1helper.IsExtendedResourceName: not native (needs a domain, and not kubernetes.io/ --
    # upstream checks "contains", which covers *.kubernetes.io too), no requests. prefix, and
    # the quota form "requests.<name>" must still be a qualified name.
    if "/" not in name:
        return "is an invalid extended resource name: it needs a domain prefix, such as example.com/gpu"
    if "kubernetes.io/" in name:
        return "is an invalid extended resource name: the kubernetes.io domain is reserved for native resources"
    if name.startswith("requests."):
        return "is an invalid extended resource name: it must not start with requests."
    if qualified_name_problem("requests." + name):
        return "is an invalid extended resource name: its quota form requests.<name> is too long"
    return None
